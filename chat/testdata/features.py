"""features.py fills in the expected output of every case of features.json
by rendering it with Python's Jinja2 configured as transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; transformers' tojson and
raise_exception). A case whose render fails gets "error": true.

Usage: python3 chat/testdata/features.py   (needs jinja2; rewrites features.json)
"""
import json
import os

import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "features.json")
with open(path, encoding="utf-8") as f:
    data = json.load(f)
for case in data["cases"]:
    case.pop("want", None)
    case.pop("error", None)
    try:
        case["want"] = env.from_string(case["template"]).render(
            messages=[{"role": "user", "content": "hi"}],
            add_generation_prompt=False,
            bos_token="",
            eos_token="",
            tools=None,
            documents=None,
            **data["vars"],
        )
    except Exception:
        case["error"] = True
with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"{path}: {len(data['cases'])} cases, {sum(1 for c in data['cases'] if c.get('error'))} errors")
