#!/usr/bin/python3
"""Renders chat templates the way Hugging Face's apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
its tojson and raise_exception), as the reference for meshrun's Jinja.
Usage: render_templates.py CASES_JSON OUT_JSON, where CASES_JSON is a list of
{"template": PATH, "variables": {...}}; OUT_JSON gets one
{"text": ...} or {"error": ...} per case."""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        with open(case["template"], encoding="utf-8") as f:
            source = f.read()
        try:
            results.append({"text": env.from_string(source).render(**case["variables"])})
        except Exception as error:  # the message is for the failure report only
            results.append({"error": "%s: %s" % (type(error).__name__, error)})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
