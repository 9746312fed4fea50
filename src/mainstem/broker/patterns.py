"""Regular expressions users give the broker (policy and operator policy patterns,
permissions, the management API's `use_regex` filter), compiled by RE2.

Any user who may set one of these can otherwise stall the event loop, and with it every
protocol: a backtracking engine (Python's `re`) takes time exponential in the name for a
pattern like `(a+)+$`. RE2 matches in time linear in the name and in the compiled program's
size, which is bounded (`MAX_PROGRAM_SIZE`): a match of a 255-character name then takes
milliseconds at worst, whatever the pattern.
What RE2 cannot run (backreferences, lookahead, lookbehind, atomic groups, possessive
quantifiers) is refused where the pattern is given, with the reason. Matching is a search,
as RabbitMQ's `re:run`: a pattern matches anywhere in the name unless anchored.
"""

from __future__ import annotations

from functools import lru_cache

import re2

from mainstem.broker.errors import InvalidArgument

MAX_PATTERN_LENGTH = 4096
# RE2's instructions: `^amq\.` is 4, `^(orders|payments|audit)\..*$` 30. Under this bound
# the worst pattern found, `([ab]{0,100}a){10}` (2014), took 7 ms on a 255-character name.
MAX_PROGRAM_SIZE = 5000
_MAX_PROGRAM_BYTES = 1 << 20  # RE2's memory for one pattern: its program and DFA states
_CACHED = 1024

# What only a backtracking engine runs, as RE2's parse error ends ("...: detail"): the
# detail's start -> what to tell the user
_UNSUPPORTED = (
    ((*(f"\\{digit}" for digit in "123456789"), "\\k", "\\g", "(?P"),
     "backreferences are not supported"),
    (("(?=", "(?!"), "lookahead is not supported"),
    (("(?<=", "(?<!"), "lookbehind is not supported"),
    (("(?>",), "atomic groups are not supported"),
    (("(?(",), "conditional groups are not supported"),
)
_REPETITION = "bad repetition operator"  # "a++": possessive when it ends in "+"


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a hostile pattern must not write to stderr
    options.never_capture = True  # only whether a name matches is asked
    options.max_mem = _MAX_PROGRAM_BYTES
    return options


_OPTIONS = _options()


class NamePattern:
    """A compiled pattern: `search(name)` tells whether it matches anywhere in `name`."""

    __slots__ = ("_regexp", "source")

    def __init__(self, source: str) -> None:
        """Raises InvalidArgument with the reason when RE2 cannot run `source`."""
        if len(source) > MAX_PATTERN_LENGTH:
            raise InvalidArgument(f"is longer than {MAX_PATTERN_LENGTH} characters")
        self.source = source
        try:
            self._regexp = re2.compile(source, _OPTIONS)
        except re2.error as error:
            raise InvalidArgument(_reason(error)) from None
        if self._regexp.programsize > MAX_PROGRAM_SIZE:
            raise InvalidArgument(f"compiles to {self._regexp.programsize} instructions,"
                                  f" more than the {MAX_PROGRAM_SIZE} a pattern may have")

    def search(self, name: str) -> bool:
        return self._regexp.search(name) is not None


def _reason(error: re2.error) -> str:
    message = error.args[0] if error.args else error
    text = message.decode(errors="replace") if isinstance(message, bytes) else str(message)
    kind, _, detail = text.partition(": ")
    unsupported = next((reason for starts, reason in _UNSUPPORTED if detail.startswith(starts)),
                       None)
    if kind == _REPETITION and len(detail) > 1 and detail.endswith("+"):
        unsupported = "possessive quantifiers are not supported"
    if unsupported is None:
        return text
    return f"{unsupported}: mainstem matches with RE2, in time linear in the name ({text})"


def name_pattern(source: object, what: str) -> NamePattern:
    """`source` compiled, or InvalidArgument saying that `what` ("pattern", "write
    permission", ...) is no regular expression mainstem can match, and why."""
    if not isinstance(source, str):
        raise InvalidArgument(f"{what} must be a string")
    try:
        return _cached(source)
    except InvalidArgument as error:
        raise InvalidArgument(f"{what} {source!r} is not a valid regex: {error}") from None


@lru_cache(maxsize=_CACHED)
def _cached(source: str) -> NamePattern:
    # Permissions and filters repeat the same few patterns; a refused one is not kept.
    return NamePattern(source)
