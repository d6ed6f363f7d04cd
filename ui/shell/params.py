"""A page's URL parameters, declared once: name, type, default and range or choices.

Every control a teacher may want in a shared link is one `Param`. A page lists them in one
`Params` table and then calls `URL.<name>.widget(st.slider, "label", ...)`: that one call reads
the URL once per session (clamping or snapping a bad value, with a note shown under the title),
keeps the value valid as the model or input changes, draws the widget bound to its session key,
and writes the value back to the URL. Ranges that depend on the model or input (a layer, a token)
are given when the widget is drawn: `URL.layer.widget(st.selectbox, "Layer", hi=n_layers - 1)`.

The low-level parsing and the notes live in ui.shell.query; nothing here is evaluated as code.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import streamlit as st

from ui.shell import query, sections

def general(value: float) -> str:
    """A number as a person writes it: 0.5, 2, 1e-05 (Python's `g` format)."""
    return f"{value:g}"


_ABSENT = object()  # not in the session

# Widgets that take their range as min_value / max_value, and those that take a list of options.
RANGE_WIDGETS = {"slider", "number_input"}
OPTION_WIDGETS = {"selectbox", "radio", "segmented_control", "select_slider", "pills", "multiselect"}


@dataclass(frozen=True)
class Param:
    """One URL parameter bound to one widget. Subclasses say how to read, check and write a value."""

    name: str  # the URL parameter
    default: Any
    key: str = ""  # the widget's session-state key (Params fills in "<page>.<name>")
    omit_default: bool = False  # the URL leaves it out while it has its default value
    written: bool = True  # False: read from a shared link, but the page does not write it back
    page: str = field(default="", compare=False)  # the page whose table lists it (Params fills it in)

    # -- what a subclass defines ------------------------------------------------------------
    def parse(self, raw_name: str, bounds: dict) -> Any:
        """The value in the URL (clamped or snapped, with a note), or None when absent or unreadable."""
        raise NotImplementedError

    def fit(self, value: Any, bounds: dict) -> Any:
        """`value` made valid for the current bounds (clamped), or None when it cannot be."""
        raise NotImplementedError

    def text(self, value: Any) -> str:
        """The value as it is written in the URL."""
        return str(value)

    def widget_kwargs(self, widget_name: str, bounds: dict) -> dict:
        """The range or options a widget of this name needs, from the bounds."""
        return {}

    # -- shared behaviour ---------------------------------------------------------------------
    def bounds(self, **overrides) -> dict:
        """This parameter's bounds, with the ones known only when the page runs (e.g. hi=n - 1)."""
        return {k: v for k, v in overrides.items() if v is not None}

    def seed(self, *, default: Any = None, url: bool = True, key: str | None = None, **overrides) -> Any:
        """The value for this run: from the URL the first time in a session (when `url`), then the
        widget's own; made valid for the current bounds. Call before the widget is drawn."""
        bounds = self.bounds(**overrides)
        start = self.fit(self.default if default is None else default, bounds)
        key = key or self.key
        if not url:
            value = st.session_state.get(key, start)
            fitted = self.fit(value, bounds)
            st.session_state[key] = start if fitted is None else fitted
            return st.session_state[key]
        return query.seed(key, self.name, lambda p: self.parse(p, bounds), start,
                          fit=lambda v: self.fit(v, bounds))

    def widget(self, widget: Callable, label: str, *, default: Any = None, url: bool = True,
               key: str | None = None, lo: Any = None, hi: Any = None, choices: Sequence | None = None,
               feeds: Optional[str] = None, **kwargs) -> Any:
        """Seed, draw `widget(label, ...)` bound to this parameter's key, and write the URL back.

        `lo`, `hi` and `choices` narrow the declared range for this run; other keyword arguments
        go to the widget. A slider whose range has one value is shown as a caption instead (a
        one-token input must not crash the page). A change reruns only the page's sections that read this
        parameter, or what it `feeds` (ui.shell.sections), wherever they are on the page; a parameter that no
        section reads reruns the page."""
        bounds = self.bounds(lo=lo, hi=hi, choices=choices)
        key = key or self.key
        value = self.seed(default=default, url=url, key=key, lo=lo, hi=hi, choices=choices)
        name = getattr(widget, "__name__", "")
        for arg, bound in self.widget_kwargs(name, bounds).items():
            kwargs.setdefault(arg, bound)
        readers = sections.readers_of(self.page, feeds or self.name)
        if readers is not None:
            if "on_change" in kwargs:  # it would be replaced: say so rather than drop the page's own callback
                raise ValueError(f"{self.key}: a control that sections read reruns them itself; give its own "
                                 f"on_change a reading of its own (feeds=) and call Sections.rerun from it")
            kwargs["on_change"] = sections.rerun_readers
            kwargs["args"] = (self if url and self.written else None, key, default, readers)
        if name == "slider" and kwargs.get("min_value") == kwargs.get("max_value"):
            st.caption(f"{label}: {self.text(value)} (the only value here)")
        else:
            options = kwargs.pop("options", None)
            value = widget(label, options, key=key, **kwargs) if options is not None else \
                widget(label, key=key, **kwargs)
        if url and self.written:
            self.write(value, default=default)
        return value

    def now(self, default: Any = None) -> Any:
        """The value the control holds now, from the session: what a fragment rerun by key reads (its arguments
        are those of the page's last full run). Before the control was first drawn: `default` or the declared
        one."""
        value = st.session_state.get(self.key, _ABSENT)
        if value is _ABSENT or not self.holds(value):  # a forged or stale widget message may leave e.g. '2: 0'
            return self.default if default is None else default
        return value

    def holds(self, value: Any) -> bool:
        """Whether `value` is of this parameter's kind (its bounds are checked where they are known: seed)."""
        return True

    def write(self, value: Any, default: Any = None) -> None:
        """Put `value` in the URL (or take the parameter out while it is at its default, if declared so)."""
        default = self.default if default is None else default
        query.write(**{self.name: None if self.omit_default and value == default else self.text(value)})

    def clear(self) -> None:
        """Take this parameter out of the URL (its control is not on the page now)."""
        query.write(**{self.name: None})


@dataclass(frozen=True)
class Int(Param):
    """A whole number in [lo, hi]; `step` snaps it to lo + k * step (e.g. even widths)."""

    lo: Optional[int] = None
    hi: Optional[int] = None
    step: int = 1

    def bounds(self, **overrides) -> dict:
        return {"lo": self.lo, "hi": self.hi, **super().bounds(**overrides)}

    def parse(self, raw_name: str, bounds: dict) -> Optional[int]:
        lo, hi = bounds["lo"], bounds["hi"]
        value = query.parse_int(raw_name, lo, max(lo, hi))
        if value is not None and self.step > 1 and (value - lo) % self.step:
            snapped = value - (value - lo) % self.step
            query.note(f"URL parameter {raw_name}={value} must be {lo} plus a multiple of {self.step}; "
                       f"using {snapped}.")
            value = snapped
        return value

    def holds(self, value: Any) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)

    def fit(self, value: Any, bounds: dict) -> Optional[int]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return None
        lo, hi = bounds["lo"], max(bounds["lo"], bounds["hi"])
        return int(min(max(int(value), lo), hi))

    def widget_kwargs(self, widget_name: str, bounds: dict) -> dict:
        if widget_name in RANGE_WIDGETS:
            return {"min_value": bounds["lo"], "max_value": max(bounds["lo"], bounds["hi"])}
        if widget_name in OPTION_WIDGETS:
            return {"options": list(range(bounds["lo"], max(bounds["lo"], bounds["hi"]) + 1, self.step))}
        return {}


@dataclass(frozen=True)
class Float(Param):
    """A finite number in [lo, hi]; with `stops`, snapped to the nearest stop (in log distance when `log`)."""

    lo: float = -math.inf
    hi: float = math.inf
    stops: tuple = ()
    log: bool = False
    fmt: Callable[[float], str] = str

    def bounds(self, **overrides) -> dict:
        return {"lo": self.lo, "hi": self.hi, **super().bounds(**overrides)}

    def _nearest(self, value: float) -> float:
        if self.log:
            return min(self.stops, key=lambda s: abs(math.log(s) - math.log(value)))
        return min(self.stops, key=lambda s: abs(s - value))

    def parse(self, raw_name: str, bounds: dict) -> Optional[float]:
        value = query.parse_float(raw_name, bounds["lo"], bounds["hi"])
        if value is None or not self.stops:
            return value
        nearest = self._nearest(value)
        if not math.isclose(nearest, value, rel_tol=1e-9, abs_tol=1e-12):
            query.note(f"URL parameter {raw_name}={value:g} is not one of the slider's values; using {nearest:g}.")
        return nearest

    def holds(self, value: Any) -> bool:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)

    def fit(self, value: Any, bounds: dict) -> Optional[float]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        if self.stops:
            return value if value in self.stops else None
        return min(max(value, bounds["lo"]), bounds["hi"])

    def text(self, value: Any) -> str:
        return self.fmt(value)

    def widget_kwargs(self, widget_name: str, bounds: dict) -> dict:
        if self.stops and widget_name in OPTION_WIDGETS:
            return {"options": list(self.stops)}
        if widget_name in RANGE_WIDGETS and math.isfinite(bounds["lo"]) and math.isfinite(bounds["hi"]):
            return {"min_value": bounds["lo"], "max_value": bounds["hi"]}
        return {}


def _plain(text: str) -> str:
    """A URL word compared without case or spaces ('L0 H1' matches 'l0h1')."""
    return "".join(text.split()).lower()


@dataclass(frozen=True)
class Choice(Param):
    """One of a list of values (strings, or numbers); `label` says how a value is written in the URL
    (e.g. a tab's short name for its title), matched without case or spaces."""

    choices: tuple = ()
    label: Callable[[Any], str] = str

    def bounds(self, **overrides) -> dict:
        return {"choices": tuple(self.choices), **super().bounds(**overrides)}

    def parse(self, raw_name: str, bounds: dict) -> Any:
        raw = query.parse_text(raw_name)
        if raw is None:
            return None
        by_word = {_plain(self.label(c)): c for c in bounds["choices"]}
        if _plain(raw) in by_word:
            return by_word[_plain(raw)]
        words = [self.label(c) for c in bounds["choices"]]
        shown = ", ".join(words[:8]) + (" ..." if len(words) > 8 else "")
        query.note(f"URL parameter {raw_name}={raw[:40]!r} is not one of: {shown}; using the default.")
        return None

    def fit(self, value: Any, bounds: dict) -> Any:
        return value if value in bounds["choices"] else None

    def text(self, value: Any) -> str:
        return self.label(value)

    def widget_kwargs(self, widget_name: str, bounds: dict) -> dict:
        return {"options": list(bounds["choices"])} if widget_name in OPTION_WIDGETS else {}

    def seed(self, *, default: Any = None, **kwargs) -> Any:
        choices = kwargs.get("choices") or self.choices
        if default is None and self.default not in choices and choices:
            default = list(choices)[0]  # the declared default is not offered here: the first choice is
        return super().seed(default=default, **kwargs)

    def widget(self, widget: Callable, label: str, *, default: Any = None, **kwargs) -> Any:
        choices = kwargs.get("choices") or self.choices
        if default is None and self.default not in choices and choices:
            default = list(choices)[0]
        return super().widget(widget, label, default=default, **kwargs)


@dataclass(frozen=True)
class Multi(Param):
    """Several of a list of values, written in the URL joined by `sep` (each as `label` writes it);
    unknown items are dropped with a note."""

    choices: tuple = ()
    sep: str = ","
    label: Callable[[Any], str] = str

    def bounds(self, **overrides) -> dict:
        return {"choices": tuple(self.choices), **super().bounds(**overrides)}

    def parse(self, raw_name: str, bounds: dict) -> Optional[list]:
        raw = query.parse_text(raw_name)
        if raw is None:
            return None
        by_word = {_plain(self.label(c)): c for c in bounds["choices"]}
        parts = [p.strip() for p in raw.split(self.sep) if p.strip()]
        unknown = [p for p in parts if _plain(p) not in by_word]
        if unknown:
            query.note(f"URL parameter {raw_name} has unknown values ({', '.join(repr(u[:20]) for u in unknown[:4])}); "
                       f"they were left out.")
        return list(dict.fromkeys(by_word[_plain(p)] for p in parts if _plain(p) in by_word))

    def fit(self, value: Any, bounds: dict) -> Optional[list]:
        if not isinstance(value, (list, tuple)):
            return None
        kept = [v for v in value if v in bounds["choices"]]
        return kept if len(kept) == len(value) else None

    def text(self, value: Any) -> str:
        return self.sep.join(self.label(v) for v in value) if isinstance(value, (list, tuple)) else str(value)

    def widget_kwargs(self, widget_name: str, bounds: dict) -> dict:
        return {"options": list(bounds["choices"])} if widget_name in OPTION_WIDGETS else {}

    def seed(self, *, default: Any = None, **kwargs) -> Any:
        return super().seed(default=list(self.default if default is None else default), **kwargs)

    def write(self, value: Any, default: Any = None) -> None:
        """An empty selection at an empty default leaves the URL (as `omit_default` says)."""
        super().write(list(value), default=list(self.default if default is None else default))


@dataclass(frozen=True)
class Text(Param):
    """Free text (length-limited by ui.shell.query); the page checks what it means (tokens, a formula). A link
    carries at most `max_chars` of it (a longer value is written cut, ui.shell.query.url_text)."""

    max_chars: int = query.MAX_PARAM_CHARS

    def parse(self, raw_name: str, bounds: dict) -> Optional[str]:
        return query.parse_text(raw_name, self.max_chars)

    def fit(self, value: Any, bounds: dict) -> Optional[str]:
        return value if isinstance(value, str) else None

    def text(self, value: Any) -> str:
        return query.url_text(str(value), self.max_chars)


@dataclass(frozen=True)
class Flag(Param):
    """On or off, written as 1 or 0."""

    def parse(self, raw_name: str, bounds: dict) -> Optional[bool]:
        raw = query.parse_choice(raw_name, ["1", "0", "true", "false"])
        return None if raw is None else raw in ("1", "true")

    def fit(self, value: Any, bounds: dict) -> Optional[bool]:
        return value if isinstance(value, bool) else None

    def text(self, value: Any) -> str:
        return "1" if value else "0"


class Params:
    """A page's URL parameters, listed once; `URL.<name>` is the parameter of that URL name."""

    def __init__(self, page: str, *params: Param):
        self.page = page
        self.params = {}
        for p in params:
            if p.name in self.params:
                raise ValueError(f"URL parameter {p.name!r} is listed twice for page {page!r}")
            self.params[p.name] = replace(p, key=p.key or f"{page}.{p.name}", page=page)

    def __getattr__(self, name: str) -> Param:
        try:
            return self.__dict__["params"][name]
        except KeyError:
            raise AttributeError(f"page {self.__dict__.get('page')!r} has no URL parameter {name!r}") from None

    def __getitem__(self, name: str) -> Param:
        return self.params[name]

    def __iter__(self):
        return iter(self.params.values())

    def clear(self, *names: str) -> None:
        """Take these parameters out of the URL (their controls are not on the page now)."""
        query.write(**{name: None for name in names})
