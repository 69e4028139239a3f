"""Tokenizer and chat templates: transformers' rendering rules, errors as user errors."""

from __future__ import annotations

import json

import pytest
from checkpoints import SPECIAL_TOKENS, make_bpe_tokenizer

from polyinfer.errors import ModelError, RequestError
from polyinfer.models.chat_template import ChatTemplate
from polyinfer.models.tokenizer import Tokenizer

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße"}]


TEMPLATES = [
    "{%- for m in messages %}\n"
    "    {%- if m.role == 'system' %}{% continue %}{% endif %}\n"
    "    [{{ m.role }}] {{ m | tojson }}\n"
    "{%- endfor %}\n"
    "{% if add_generation_prompt %}{{ bos_token }}{% endif %}",
    "{% for m in messages %}\n  {% if loop.first %}<s>{% endif %}\n{{ m['content'] | tojson(indent=2) }}\n{% endfor %}",
    "{{ strftime_now('%Y') | length }} {{ messages | map(attribute='role') | join(',') }}",
]


@pytest.mark.parametrize("source", TEMPLATES)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_renders_exactly_as_transformers(source, add_generation_prompt):
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        [MESSAGES], chat_template=source, add_generation_prompt=add_generation_prompt, bos_token="<s>"
    )
    ours = ChatTemplate(source).render(MESSAGES, add_generation_prompt=add_generation_prompt, bos_token="<s>")
    assert ours == rendered[0]


def test_raise_exception_becomes_a_request_error():
    template = ChatTemplate(
        "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
    )
    with pytest.raises(RequestError, match="first must be user"):
        template.render(MESSAGES)
    with pytest.raises(RequestError, match="string 'role'"):
        template.render([{"content": "no role"}])


def test_broken_template_is_a_model_error():
    with pytest.raises(ModelError, match="does not parse"):
        ChatTemplate("{% for m in messages %}")


def test_sandbox_blocks_attribute_escapes():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(Exception, match=r"unsafe|not safely|access"):
        template.render(MESSAGES)


def test_no_template_is_a_request_error():
    tok = Tokenizer(make_bpe_tokenizer())
    with pytest.raises(RequestError, match="no chat template"):
        tok.apply_chat_template(MESSAGES)


def test_round_trip_through_files(tmp_path):
    tok = Tokenizer(
        make_bpe_tokenizer(),
        chat_template="{% for m in messages %}<|im_start|>{{ m['content'] }}{{ eos_token }}{% endfor %}",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        eos_token_ids=(2,),
    )
    tok.save(tmp_path)
    again = Tokenizer.from_dir(tmp_path)
    assert (again.chat_template, again.bos_token, again.eos_token, again.eos_token_ids) == (
        tok.chat_template,
        tok.bos_token,
        tok.eos_token,
        (2,),
    )
    text = again.apply_chat_template(MESSAGES)
    assert text == "<|im_start|>Be brief.<|im_end|><|im_start|>Grüße<|im_end|>"
    ids = again.encode(text, add_special_tokens=False)
    assert ids.count(SPECIAL_TOKENS.index("<|im_end|>")) == 2 and again.decode(ids) == "Be brief.Grüße"


def test_named_templates_use_the_default_one(tmp_path):
    make_bpe_tokenizer().save(str(tmp_path / "tokenizer.json"))
    templates = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": templates}))
    assert Tokenizer.from_dir(tmp_path).apply_chat_template(MESSAGES) == "plain"


def test_unreadable_tokenizer_json(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read"):
        Tokenizer.from_dir(tmp_path)
