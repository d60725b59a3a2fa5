"""docs/api.md's constructor signatures are the code's: the same parameters, in the same
order, with the same defaults."""
from __future__ import annotations

import ast
import inspect
import os
import re

import pytest

import slidewin

API = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "api.md")


def literal(node: ast.expr) -> object:
    """A default as written: a literal's value, else its source (`(Exception,)`)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def documented(name: str) -> inspect.Signature:
    """The signature api.md gives in `x = Name(...)`, its text up to the closing parenthesis."""
    with open(API, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\w+ = %s\(" % name, text, re.M)
    assert m, f"docs/api.md shows no `... = {name}(...)`"
    depth, i = 0, m.end() - 1
    while True:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            break
        i += 1
    args = re.sub(r"#[^\n]*", "", text[m.end():i])   # comments inside the call
    fn = ast.parse(f"def f({args}): pass").body[0]
    params = []
    a = fn.args
    pos = a.posonlyargs + a.args
    for j, arg in enumerate(pos):
        k = j - (len(pos) - len(a.defaults))
        default = literal(a.defaults[k]) if k >= 0 else inspect.Parameter.empty
        kind = (inspect.Parameter.POSITIONAL_ONLY if j < len(a.posonlyargs)
                else inspect.Parameter.POSITIONAL_OR_KEYWORD)
        params.append(inspect.Parameter(arg.arg, kind, default=default))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        default = inspect.Parameter.empty if d is None else literal(d)
        params.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                                        default=default))
    return inspect.Signature(params)


# accepted by the constructor but left out of the page on purpose
UNDOCUMENTED = {
    # Limiter's settings that no KeyedLimiter behavior uses (reject, throttle, concurrency)
    "KeyedLimiter": {"warm_up_s", "cold_factor", "occupy_timeout_ms"},
}


def real(cls: type) -> inspect.Signature:
    sig = inspect.signature(cls.__new__)
    params = list(sig.parameters.values())[1:]                   # cls
    out = []
    for p in params:
        if p.name in UNDOCUMENTED.get(cls.__name__, ()):
            continue
        d = p.default
        if isinstance(d, tuple) and all(isinstance(e, type) for e in d):
            d = "(" + ", ".join(e.__name__ for e in d) + ",)"  # errors=(Exception,)
        out.append(p.replace(default=d, annotation=inspect.Parameter.empty))
    return inspect.Signature(out)


@pytest.mark.parametrize("cls", [slidewin.Limiter, slidewin.KeyedLimiter,
                                 slidewin.AdaptiveLimiter, slidewin.Breaker],
                         ids=lambda c: c.__name__)
def test_the_api_page_shows_each_constructor_as_the_code_has_it(cls):
    assert str(documented(cls.__name__)) == str(real(cls))


def test_the_api_page_lists_every_key_of_a_limiters_totals():
    with open(API, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^lim\.totals\(\) +# \{(.*?)\}", text, re.M | re.S)
    assert m, "docs/api.md shows no lim.totals()"
    listed = set(re.findall(r'"(\w+)"', m.group(1)))
    assert listed == set(slidewin.Limiter(qps=1).totals())


def test_the_web_page_shows_limitmiddleware_with_every_option():
    import slidewin.asgi
    import slidewin.wsgi

    web = os.path.join(os.path.dirname(API), "web.md")
    with open(web, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^LimitMiddleware\((.*?)\)\n", text, re.M | re.S)
    assert m, "docs/web.md shows no LimitMiddleware(...) signature"
    shown = [p.strip().split("=")[0] for p in m.group(1).split(",") if p.strip() != "*"]
    for cls in (slidewin.asgi.LimitMiddleware, slidewin.wsgi.LimitMiddleware):
        assert shown == list(inspect.signature(cls.__init__).parameters)[1:]
