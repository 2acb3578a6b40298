#!/usr/bin/python3
"""Renders chat templates the way Hugging Face's apply_chat_template does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
its tojson, raise_exception and strftime_now), as the reference for meshrun's Jinja.
Usage: render_templates.py CASES_JSON OUT_JSON, where CASES_JSON is a list of
{"template": PATH, "variables": {...}}; OUT_JSON gets one
{"text": ..., "generation": [[BEGIN, END], ...]} or {"error": ...} per case,
where generation holds the UTF-8 byte ranges {% generation %} blocks wrote
(tracked the way transformers' AssistantTracker does for
return_assistant_tokens_mask)."""
import datetime
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTracker(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body and records
    where in the output it landed (character offsets)."""
    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        self.rendered = []
        self.spans = []

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_generation"), [], [], body).set_lineno(lineno)

    def _render_generation(self, caller):
        text = caller()
        start = sum(len(block) for block in self.rendered)
        if text:
            self.spans.append((start, start + len(text)))
        return text


def render(env, source, variables):
    tracker = env.extensions[GenerationTracker.identifier]
    tracker.rendered, tracker.spans = [], []
    for block in env.from_string(source).generate(**variables):
        tracker.rendered.append(block)
    text = "".join(tracker.rendered)
    spans = [[len(text[:begin].encode("utf-8")), len(text[:end].encode("utf-8"))] for begin, end in tracker.spans]
    return {"text": text, "generation": spans}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    return datetime.datetime.now().strftime(format)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, GenerationTracker])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        with open(case["template"], encoding="utf-8") as f:
            source = f.read()
        try:
            results.append(render(env, source, case["variables"]))
        except Exception as error:  # the message is for the failure report only
            results.append({"error": "%s: %s" % (type(error).__name__, error)})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
