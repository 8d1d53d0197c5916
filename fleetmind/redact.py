"""Secrets kept out of what FleetMind shows: the ``user:password@`` of URLs and their
password-like query parameters; and outside text made safe to print on a terminal
(:func:`terminal_safe`: control characters shown escaped), measured in terminal columns
(:func:`display_width`) and padded or cut by them (:func:`pad`, :func:`head_in_width`,
:func:`tail_in_width`) without splitting a character as shown (:func:`can_cut`).

Database, Prometheus and MLflow URLs may carry credentials (basic auth, or libpq's
``?password=`` / ``?sslpassword=``), and the messages that quote them reach logs, API answers,
MLflow params and read-scope clients (OWASP Logging Cheat Sheet: never log passwords or tokens)::

    >>> from fleetmind.redact import safe_uri
    >>> safe_uri("cannot query http://admin:s3cr@t@prom:9090/api: refused")
    'cannot query http://***@prom:9090/api: refused'
    >>> safe_uri("postgresql+psycopg://u@db/fm?sslmode=require&password=s3cr")
    'postgresql+psycopg://***@db/fm?sslmode=require&password=***'

A URL given without its scheme (``fm:s3cr@db:5432/fm``) and a libpq keyword/value connection
string (``host=db password=s3cr``) are masked as well::

    >>> safe_uri("cannot use fm:s3cr@db:5432/fm or 'host=db password=s3cr dbname=fm'")
    "cannot use ***@db:5432/fm or 'host=db password=*** dbname=fm'"
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from urllib.parse import quote, unquote_plus

_QUOTED_URL = re.compile(r"""(['"])(?:[A-Za-z][A-Za-z0-9+.-]*:)?//""")
"""The start of a quoted URL (``repr``'s ``'http://...'``, or ``"..."``): its quote, scheme and
``//``."""
_TOKEN = re.compile(r"""[^\s'"]+""")
"""A run of text without whitespace or quotes: a URL in prose ends where it ends."""


def _userinfo_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each URL's ``user:password@`` in ``text``, without its ``@``: from
    ``//`` to the last ``@`` before the URL ends, so that a password holding an unescaped ``@``,
    ``/``, ``?`` or ``#`` (``openssl rand -base64`` output: ``http://admin:Zm9v/YmFy+cw==@prom``)
    is masked whole, although a URL parser would end the authority at its first ``/``, ``?`` or
    ``#``. A URL in prose ends at whitespace or a quote; a quoted URL at its closing quote (one
    escaped with ``\\`` does not close it) or whitespace, so a later URL in the same message is
    never swallowed when a space or a quote separates them. Text cannot tell such a password from
    an ``@`` further on in a path or query, so that is masked too: ``http://host/a@b`` shows as
    ``http://***@b`` (more hidden than needed, never a secret shown).

    A run of text without ``//`` that holds a ``:`` before its last ``@`` is taken for a URL
    given without its scheme (``fm:s3cr@db:5432/fm``, which a database URL setting may be by
    mistake): masked from its start to that ``@`` (:func:`_schemeless_userinfo`). An e-mail
    address (no ``:`` before its ``@``) is not, nor an MLflow URI (``models:/fleetmind-rca@champion``),
    an image reference (``registry.io/team/img:v1.2@sha256:...``) or a pod on a node
    (``gpu-ns/train-0:worker@node-7``).

    Linear in ``len(text)``: each quoted URL is scanned once, and the next search starts after it
    (a regular expression backtracking from every ``//`` or quote was quadratic in a request path
    the access log masks)."""
    spans: list[tuple[int, int]] = []
    if "@" not in text:  # no user part: most access lines and messages
        return spans
    pos = 0
    while (m := _QUOTED_URL.search(text, pos)) is not None:
        quote, i, last_at = m.group(1), m.end(), -1
        while i < len(text) and text[i] != quote and not text[i].isspace():
            if text[i] == "\\":
                i += 1
            elif text[i] == "@":
                last_at = i
            i += 1
        if last_at >= 0:
            spans.append((m.end(), min(last_at, len(text))))
        pos = max(i, m.end())
    for t in _TOKEN.finditer(text):
        token = t.group(0)
        start, end = token.find("//"), token.rfind("@")
        if start >= 0 and end >= start + 2:
            spans.append((t.start() + start + 2, t.start() + end))
        elif start < 0 and _schemeless_userinfo(token, end):
            spans.append((t.start(), t.start() + end))
    return spans


_MODEL_URI_SCHEMES = ("models", "runs", "mlflow-artifacts")
"""Schemes of MLflow URIs that hold an ``@`` in their path (``models:/fleetmind-rca@champion``)."""
_DIGEST = re.compile(r"sha(?:256|512):", re.IGNORECASE)
"""An image digest after an ``@`` (``registry.io/team/img:v1.2@sha256:...``)."""


def _schemeless_userinfo(token: str, at: int) -> bool:
    """Whether ``token`` (no ``//``; its last ``@`` at ``at``) is ``user:password@host`` written
    without a scheme: a ``:`` before the ``@`` with no ``/`` before it, not an MLflow URI (its
    scheme in lower case, then ``:/``: ``models:/x@champion``; ``models:s3cr@db`` is masked), and no image digest after the ``@`` (``img:v1@sha256:...``).
    A pod or image reference (``ns/pod:worker@node-7``, ``nvcr.io/nvidia/pytorch:24.01@...``) has
    a ``/`` before its ``:``."""
    colon = token.find(":")
    if not 0 <= colon < at or "/" in token[:colon]:
        return False
    if token[:colon] in _MODEL_URI_SCHEMES and token[colon + 1 : colon + 2] == "/":
        return False
    return _DIGEST.match(token, at + 1) is None


def without_password(url: str) -> str:
    """``url`` with the password of its ``user:password@`` removed, the user name kept:
    ``http://tenant1:s3cr@am:9093/x`` -> ``http://tenant1@am:9093/x``. The user part is looked
    for in the authority alone (after ``//``, up to the first ``/``, ``?`` or ``#``; RFC 3986
    section 3.2), so an ``@`` in a path is left alone. A key for a configured URL that may be
    stored or compared without its password (a rotated password keeps the key, two tenants of
    one Alertmanager keep theirs)."""
    head, sep, rest = url.partition("//")
    if not sep:
        return url
    cut = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    userinfo, at, host = authority.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{head}//{user}@{host}{tail}" if user else f"{head}//{host}{tail}"


SECRET_PARAM_WORDS = (
    "password", "passwd", "pwd", "pass", "token", "secret", "key", "apikey", "auth",
    "credential", "credentials", "signature", "sig",
)  # fmt: skip
"""A query parameter whose name holds one of these as a word (its name split at ``-``, ``_`` and
``.``, any case), or a word ending in ``password``, ``token`` or ``secret``, has its value masked:
``password``, ``sslpassword``, ``access_token``, ``api_key``, ``X-Amz-Signature``, ... but not
``keyword``, ``monkey``, ``author`` or ``passfile`` (a path)."""
_SECRET_ENDINGS = ("password", "token", "secret")
_PARAM_START = re.compile(r"[?&;]")
_NAME_STOP = re.compile(r"[=&#?;\s'\"]")
_VALUE_STOP = re.compile(r"[&#;\s'\"]")


_KEYWORD_VALUE = re.compile(
    r"""(?:^|(?<=[\s'"(]))([A-Za-z_][\w.-]*)[ \t]*=[ \t]*('(?:[^'\\]|\\.)*'?|(?:[^\s'"]|['"](?!\s|$))*)"""
)
"""A ``keyword=value`` pair at the start of the text or after whitespace, a quote or ``(``, as
libpq's keyword/value connection strings write them (``host=db password='a b'``: a value may be
single-quoted, with ``\\'`` and ``\\\\`` escaped; PostgreSQL, "Connection Strings"). An
unquoted value runs to whitespace, or to a quote before whitespace (the closing quote of the
message's ``repr``)."""


def _secret_name(name: str) -> bool:
    words = [w for w in re.split(r"[-_.]", name.lower()) if w]
    return any(w in SECRET_PARAM_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


_KEYWORD_ENDINGS = ("password", "passwd", "pwd", "token", "secret", "signature")
"""A ``keyword=value`` pair's name that is or ends in one of these (any case) has its value masked:
``password``, libpq's ``sslpassword``, ``FLEETMIND_API_TOKEN``, ``X-Amz-Signature``, ... but not a
path setting (``FLEETMIND_TLS_KEY``, ``..._TOKEN_FILE``) nor MLflow's ``key='x'``
(:func:`_keyword_secret` adds the key names)."""
_KEY_QUALIFIERS = frozenset({"api", "secret", "access", "private"})
"""Words before a last word ``key`` that make a name a secret key's (``api_key``, ``X-Api-Key``,
``aws_secret_access_key``, ``private_key``), unlike ``key``, ``sslkey`` or ``FLEETMIND_TLS_KEY``."""
_KEYWORD_NAMES = frozenset({"apikey", "credentials"})
"""Last words of a ``keyword=value`` name that mark a secret on their own (``apikey``,
``credentials``)."""


def _keyword_secret(name: str) -> bool:
    """Whether the ``keyword=value`` pair named ``name`` holds a secret (:data:`_KEYWORD_ENDINGS`,
    :data:`_KEYWORD_NAMES`, or a last word ``key`` after one of :data:`_KEY_QUALIFIERS`; the name
    split at ``_``, ``-`` and ``.``, any case). A name ending in ``_FILE`` (a path) is not one."""
    low = name.lower()
    if low.endswith(_KEYWORD_ENDINGS):
        return True
    words = [w for w in re.split(r"[-_.]", low) if w]
    if not words:
        return False
    if words[-1] in _KEYWORD_NAMES:
        return True
    return words[-1] == "key" and any(w in _KEY_QUALIFIERS for w in words[:-1])


def _keyword_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the value of each password-like ``keyword=value`` pair
    (:data:`_KEYWORD_VALUE`, :func:`_keyword_secret`) in ``text``: a libpq connection string's
    ``password=...``, also where one was given as a database URL by mistake."""
    if "=" not in text:
        return []
    return [
        m.span(2)
        for m in _KEYWORD_VALUE.finditer(text)
        if m.group(2) and _keyword_secret(m.group(1))
    ]


def _param_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the value of each password-like query parameter in ``text``: a name
    after ``?``, ``&`` or ``;`` up to ``=``, its value up to the next ``&``, ``#``, ``;``,
    whitespace or quote. Every separator is tried, also one inside another parameter's value or a
    URL's user part (``u:Tr0ub&d=or@db/fm?sslpassword=...``: a scan resuming after the match of
    ``&d=`` never saw ``sslpassword``); the ends are looked up in the separators' positions, so
    the scan stays O(n log n)."""
    if "=" not in text:  # no parameter: most access lines and messages
        return []
    name_stops = [m.start() for m in _NAME_STOP.finditer(text)]
    value_stops = [m.start() for m in _VALUE_STOP.finditer(text)]

    def next_stop(stops: list[int], i: int) -> int:
        k = bisect_left(stops, i)
        return stops[k] if k < len(stops) else len(text)

    spans = []
    for m in _PARAM_START.finditer(text):
        start = m.end()
        eq = next_stop(name_stops, start)
        if eq == start or eq >= len(text) or text[eq] != "=":
            continue
        end = next_stop(value_stops, eq + 1)
        if end > eq + 1 and _secret_name(text[start:eq]):
            spans.append((eq + 1, end))
    return spans


def safe_uri(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with each URL's ``user:password@`` shown as
    ``***@`` (also one given without its scheme: ``fm:s3cr@db/fm``) and the value of each
    password-like query parameter or libpq ``keyword=value`` pair (:data:`SECRET_PARAM_WORDS`,
    :func:`_keyword_secret`) as ``***``."""
    spans = _userinfo_spans(text) + _param_spans(text) + _keyword_spans(text)
    # both rules on the original text, their spans merged: applied one after the other, the
    # first could hide the other's context (``?password=`` inside a masked user part) and show
    # the tail of a secret (``password=Hunter@2024x`` after ``//u@db/``)
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, done = [], 0
    for start, end in merged:
        out += [text[done:start], "***"]
        done = end
    out.append(text[done:])
    return "".join(out)


def _mask_field(field: str) -> str:
    """One ``&``-separated field of a query with its value as ``***`` when its name (percent-decoded)
    is password-like; a ``;``-separated parameter inside it is checked as well, and masked with
    everything after it (a server may split a query at ``;`` too). A value that is itself an
    encoded URL or target (``next=/ui/x%3Faccess_token%3D...``) is decoded once and masked by
    :func:`safe_uri`, then encoded again."""
    name, eq, value = field.partition("=")
    if eq and value and _secret_name(unquote_plus(name)):
        return f"{name}=***"
    parts = field.split(";")
    for i, part in enumerate(parts[1:], start=1):
        name, eq, value = part.partition("=")
        if eq and value and _secret_name(unquote_plus(name)):
            return ";".join([*parts[:i], f"{name}=***"])
    name, eq, value = field.partition("=")
    if eq and "%" in value:
        inner = unquote_plus(value)
        masked = safe_uri(inner)
        if masked != inner:
            return f"{name}={quote(masked, safe='/*')}"
    return field


def safe_request_target(target: str) -> str:
    """An HTTP request target (``/path?query``, as an access log line quotes it) with the value of
    each password-like query parameter as ``***``, by the rule of :func:`safe_uri`
    (:data:`SECRET_PARAM_WORDS`): ``/api/v1/incidents?access_token=***`` (RFC 6750 section 2.3
    puts a bearer token there).

    Unlike :func:`safe_uri`, which finds URLs inside prose, the query here is split as a server
    splits it: a value runs to the next ``&`` whatever it holds (a quote included), and a name is
    percent-decoded before the check (``access%5Ftoken``). The path is passed through
    :func:`safe_uri`."""
    path, sep, query = target.partition("?")
    if not sep:
        return safe_uri(target)
    return f"{safe_uri(path)}?{'&'.join(_mask_field(f) for f in query.split('&'))}"


def drop_secret_params(query: str) -> str:
    """``query`` (a URL's query, without its ``?``) without the fields that
    :func:`safe_request_target` would mask: a password-like parameter (``access_token=...``,
    ``token=...``), or one whose encoded value holds one. For a URL built from a request's own
    (a login form's ``next``), which would otherwise carry the secret into a redirect, a page,
    the browser's history and the access log."""
    return "&".join(f for f in query.split("&") if f and _mask_field(f) == f)


_INVISIBLE = frozenset(
    "\u061c\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2066\u2067\u2068\u2069\ufeff"
)
"""Bidirectional and zero-width controls (Unicode TR 9; CVE-2021-42574, "Trojan Source"): they
reorder or hide what a terminal shows, so outside text shows them escaped."""


def _shown(char: str) -> str:
    """``char`` as printed: itself when printable, else its escape as ``repr`` writes it
    (``\\x1b``, ``\\r``, ``\\n``, ``\\t``, ``\\u202e``, ``\\udcff``) without quotes."""
    if char.isprintable() and char not in _INVISIBLE:
        return char
    return repr(char)[1:-1]


_ESCAPED_BYTES = re.compile("[\udc80-\udcff]+")
"""A run of the lone surrogates ``U+DC80``-``U+DCFF`` that ``surrogateescape`` decodes the bytes
``0x80``-``0xFF`` to when the locale cannot decode them (``LC_ALL=C`` without UTF-8 mode)."""


def _utf8_reread(text: str) -> str:
    """``text`` with each run of :data:`_ESCAPED_BYTES` read again as the UTF-8 its bytes are
    (``d\\udcc3\\udca9`` -> ``dé``: a path given under a C locale), so that a path prints as a
    name holding the same characters does; the bytes that are not UTF-8 stay surrogates."""
    return _ESCAPED_BYTES.sub(
        lambda m: bytes(ord(c) - 0xDC00 for c in m.group()).decode("utf-8", "surrogateescape"),
        text,
    )


def terminal_safe(text: str) -> str:
    """``text`` (from outside: an alert label, a Prometheus label value, a remote error body) fit
    to print on a terminal: every character that is not printable (C0/C1 controls, DEL, ESC, CR,
    LF, TAB) or that reorders or hides text (bidi and zero-width controls) is shown escaped, so no
    escape sequence reaches the terminal (CWE-150: OSC 8 links, OSC 52 clipboard writes, CSI
    cursor moves) and no CR/LF forges a line (CWE-117). Other Unicode stays as is::

        >>> terminal_safe("gpu-0\\x1b]52;c;eA==\\x07\\r\\nok  forged ünïcode 节点")
        'gpu-0\\\\x1b]52;c;eA==\\\\x07\\\\r\\\\nok  forged ünïcode 节点'

    A file name or argument that the locale could not decode (``surrogateescape``: ``LC_ALL=C``
    without UTF-8 mode) is first read again as UTF-8 where its bytes are UTF-8
    (:func:`_utf8_reread`): the folder ``dé`` prints as ``dé``, as the cluster name ``dé`` does (on
    an ASCII stdout :func:`fleetmind.cli.runner.run_main` writes both ``d\\xe9``). A byte that is
    not UTF-8 shows as ``repr`` writes it, ``\\udcXX`` (``a\\udcff``): never ``\\xXX``, which
    is how that stdout writes the character ``U+00XX``, so the two cannot be confused.
    """
    text = _utf8_reread(text)
    if text.isprintable() and _INVISIBLE.isdisjoint(text):
        return text
    return "".join(_kept(text, i) for i in range(len(text)))


_JOINERS = frozenset("\u200c\u200d")
"""ZWNJ and ZWJ: kept between two printable non-ASCII characters, where text needs them (emoji
sequences such as 👩\u200d💻, Persian and Indic words); escaped elsewhere."""


def _kept(text: str, i: int) -> str:
    """``text[i]`` as :func:`terminal_safe` prints it: a joiner between two printable non-ASCII
    characters and a space character (NBSP, thin space: Unicode category Zs) as themselves, every
    other character as :func:`_shown` shows it."""
    char = text[i]
    if char in _JOINERS and 0 < i < len(text) - 1:
        before, after = text[i - 1], text[i + 1]
        if all(ord(c) > 127 and _shown(c) == c for c in (before, after)):
            return char
    if unicodedata.category(char) == "Zs":
        return char
    return _shown(char)


_ZERO_WIDTH = frozenset({"Mn", "Me", "Cf"})
"""Unicode categories that take no column: combining marks (``Mn``, ``Me``, variation selectors
included) and format characters (``Cf``: ZWJ, bidi controls, tag characters)."""
_ZWJ = "\u200d"
_VS16, _KEYCAP = "\ufe0f", "\u20e3"
"""U+FE0F VARIATION SELECTOR-16 (emoji presentation) and U+20E3 COMBINING ENCLOSING KEYCAP: after
a narrow character (U+2764 HEAVY BLACK HEART, ``1``) the pair is drawn as one wide emoji
(Unicode UTS #51)."""


def _jamo_vt(char: str) -> bool:
    """A Hangul medial vowel (jungseong) or final consonant (jongseong) jamo: it joins the
    syllable before it (Unicode UAX #29 ``V``/``T``; UAX #11 draws it in no column of its own)."""
    return "\u1160" <= char <= "\u11ff" or "\ud7b0" <= char <= "\ud7ff"


def _jamo_l(char: str) -> bool:
    """A Hangul leading consonant (choseong) jamo: UAX #29 ``L``."""
    return "\u1100" <= char <= "\u115f" or "\ua960" <= char <= "\ua97f"


def _modifier(char: str) -> bool:
    """An emoji skin-tone modifier, U+1F3FB..U+1F3FF."""
    return "\U0001f3fb" <= char <= "\U0001f3ff"


def _emoji_base(char: str) -> bool:
    """A character an emoji modifier may follow: Miscellaneous Symbols and Dingbats (U+261D,
    U+270C) or the emoji blocks U+1F000..U+1FAFF (an approximation of UTS #51's
    ``Emoji_Modifier_Base``)."""
    return "\u2600" <= char <= "\u27bf" or "\U0001f000" <= char <= "\U0001faff"


def char_width(char: str) -> int:
    """Columns ``char`` takes on its own on a terminal or in a monospace font: 0 for a combining
    mark or a format character (:data:`_ZERO_WIDTH`) and for a Hangul vowel or final jamo
    (U+1160..U+11FF, U+D7B0..U+D7FF: part of the syllable before it), 2 for a wide or fullwidth
    one (East Asian Width ``W``/``F``, Unicode UAX #11: CJK ideographs, kana, Hangul, most
    emoji), else 1. :func:`display_width` also counts what the characters before change."""
    if unicodedata.category(char) in _ZERO_WIDTH or _jamo_vt(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _width_at(text: str, i: int) -> int:
    """Columns ``text[i]`` adds after ``text[:i]``: a U+FE0F or U+20E3 after a narrow character
    adds 1 (U+2764 U+FE0F and ``1`` U+20E3 are drawn 2 columns wide; a keycap after a
    widening U+FE0F adds none); an emoji modifier adds none after a wide emoji and 1 after a
    narrow one (U+261D); else :func:`char_width`."""
    char, before = text[i], text[i - 1] if i else ""
    if char in (_VS16, _KEYCAP):
        if char == _KEYCAP and before == _VS16:
            return 0
        return 1 if before and char_width(before) == 1 else 0
    if _modifier(char) and before and _emoji_base(before):
        return 2 - char_width(before)
    return char_width(char)


def display_width(text: str) -> int:
    """Columns ``text`` takes on a terminal or in a monospace font: the sum of
    :func:`_width_at` (``"节点"``: 4, ``"e\\u0301"``: 1, ``"\\u2764\\ufe0f"``: 2,
    ``"\\U0001f44d\\U0001f3fd"``: 2). A sequence joined by U+200D ZWJ counts each of its parts,
    an over-estimate where a font draws it as one glyph."""
    return sum(_width_at(text, i) for i in range(len(text)))


def _regional(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


def can_cut(text: str, i: int) -> bool:
    """Whether ``text`` may be cut before ``text[i]`` without splitting a character as shown
    (an approximation of Unicode UAX #29 grapheme clusters): never after a ZWJ, before a ZWJ,
    combining mark (``Mn``, ``Mc``, ``Me``: accents, variation selectors, the keycap), emoji
    skin-tone modifier or tag character, inside a pair of regional indicators (a flag), before a
    Hangul vowel or final jamo, nor after a leading jamo before another jamo or syllable."""
    if i <= 0 or i >= len(text):
        return True
    before, char = text[i - 1], text[i]
    if before == _ZWJ or char == _ZWJ or before + char == "\r\n":
        return False
    if unicodedata.category(char) in ("Mn", "Mc", "Me") or _jamo_vt(char):
        return False
    if _modifier(char) or "\U000e0020" <= char <= "\U000e007f":
        return False
    if _jamo_l(before) and (_jamo_l(char) or "\uac00" <= char <= "\ud7a3"):
        return False
    if _regional(before) and _regional(char):
        run = 0
        while run < i and _regional(text[i - 1 - run]):
            run += 1
        return run % 2 == 0
    return True


def head_in_width(text: str, columns: int) -> str:
    """The longest start of ``text`` that takes at most ``columns`` columns
    (:func:`display_width`) and ends where :func:`can_cut` allows."""
    used, end = 0, 0
    for i in range(len(text)):
        used += _width_at(text, i)
        if used > columns:
            break
        end = i + 1
    while end > 0 and not can_cut(text, end):
        end -= 1
    return text[:end]


def tail_in_width(text: str, columns: int) -> str:
    """The longest end of ``text`` that takes at most ``columns`` columns
    (:func:`display_width`) and starts where :func:`can_cut` allows."""
    used, start = 0, len(text)
    for i in range(len(text) - 1, -1, -1):
        used += _width_at(text, i)
        if used > columns:
            break
        start = i
    while start < len(text) and not can_cut(text, start):
        start += 1
    return text[start:]


def pad(text: str, columns: int, align: str = "<") -> str:
    """``text`` padded with spaces to ``columns`` columns (:func:`display_width`, not code
    points: ``"节点"`` takes 4), on the right (``align="<"``) or the left (``">"``); longer text is
    returned as it is. Escape outside text first (:func:`terminal_safe`): an escape is longer
    than the character it shows."""
    fill = " " * max(0, columns - display_width(text))
    return fill + text if align == ">" else text + fill
