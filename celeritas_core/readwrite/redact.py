"""Credentials out of every message and log line: URLs' passwords, secret-like settings, signatures.

A tracking URI such as ``http://user:s3cret@mlflow:5000`` or a presigned S3 URL would otherwise
reach error messages, task logs and the CLI's output. :func:`redact` replaces the secret part with
``***`` and leaves the rest readable (host, path, the names of the settings). A setting is secret
when its name says so (``*SECRET*``, ``*PASSWORD*``, ``*TOKEN``, ``*CREDENTIAL*``, ``*_KEY``); the
project's configuration keys (``config_key``, 16 hex digits) and run ids are not secrets and stay.

>>> redact("MLflow tracking server http://alice:s3cret@10.0.0.5:5000 unreachable")
'MLflow tracking server http://alice:***@10.0.0.5:5000 unreachable'
>>> redact("AWS_SECRET_ACCESS_KEY=abc123 config_key=0123456789abcdef")
'AWS_SECRET_ACCESS_KEY=*** config_key=0123456789abcdef'
>>> redact("https://b.s3.amazonaws.com/k?X-Amz-Signature=deadbeef&X-Amz-Expires=60")
'https://b.s3.amazonaws.com/k?X-Amz-Signature=***&X-Amz-Expires=60'
"""

from __future__ import annotations

import logging
import re

MASK = "***"

#: ``scheme://user:password@host``: the password (any characters but ``@``, ``/`` and spaces).
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)(?P<secret>[^\s@/]+)(?=@)")
#: ``NAME=value``, ``NAME: value`` or ``'name': 'value'``: the setting's name and where its value starts;
#: :func:`_secret_name` decides whether the value is a secret.
_SETTING = re.compile(r"\b(?P<name>[A-Za-z][A-Za-z0-9_.-]*)['\"]?\s*[=:]\s*")
#: a setting's value: quoted (up to the closing quote), a scheme and its token, or one word.
_VALUE = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|(?:(?:Bearer|Basic)\s+)?[^\s'\"&,;]+")
#: names whose values are secrets wherever the word is in them (any case).
_SECRET_WORDS = re.compile(r"SECRET|PASSWORD|PASSWD|CREDENTIAL|SIGNATURE|ACCESS_?KEY|PRIVATE_?KEY|"
                           r"API_?KEY|ACCOUNT_?KEY|AUTHORIZATION|TOKEN(?![A-Z])|(?<![A-Z])AUTH(?![A-Z])",
                           re.IGNORECASE)
#: names that end in "key" but name no secret: the project's configuration key (16 hex digits shown
#: to users), a bare "key", Python's KeyError.
_PUBLIC_KEYS = re.compile(r"(?:^|[_.-])(?:config|configuration)[_.-]?key$|^key$", re.IGNORECASE)
#: query parameters of presigned URLs and bearer tokens.
_SIGNED_QUERY = re.compile(r"(?P<head>[?&](?:X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|"
                           r"Signature|sig|token|access_token)=)(?P<secret>[^&\s]+)", re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})")


def redact(text: str) -> str:
    """``text`` with passwords, tokens, secret keys and URL signatures replaced by ``***``."""
    if not isinstance(text, str):
        text = str(text)
    for pattern in (_URL_PASSWORD, _SIGNED_QUERY):
        text = pattern.sub(lambda m: m.group("head") + MASK, text)
    text = _redact_settings(text)
    return _BEARER.sub(lambda m: m.group("head") + MASK, text)


def _secret_name(name: str) -> bool:
    """Whether a setting called ``name`` holds a secret (``AWS_SECRET_ACCESS_KEY``, ``db.password``,
    ``MLFLOW_TRACKING_TOKEN``, ``AccountKey``, ``PRIVATE_KEY``), not ``config_key``, ``max_tokens``,
    ``author`` or ``KeyError``."""
    if _SECRET_WORDS.search(name):
        return True
    return bool(re.search(r"(?:[a-z0-9_.-]Key|KEY|_key|\.key|-key)$", name)) and not _PUBLIC_KEYS.search(name)


def _redact_settings(text: str) -> str:
    """Mask the value of every secret-named setting; a non-secret one's value is still scanned (it may
    hold a setting of its own, as ``DSN=host=h password=x`` does)."""
    spans: list[tuple[int, int]] = []
    for match in _SETTING.finditer(text):
        if not _secret_name(match.group("name")) or (spans and match.start() < spans[-1][1]):
            continue
        value = _VALUE.match(text, match.end())
        if value is not None:
            quoted = value.group(0)[:1] in "'\"" and len(value.group(0)) >= 2
            spans.append((value.start() + quoted, value.end() - quoted))
    for start, end in reversed(spans):
        text = text[:start] + MASK + text[end:]
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message (arguments merged in first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler's own error path
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = RedactingFilter()


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Redact every record handled by ``logger``'s handlers (default: the root logger's), once."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
    if _FILTER not in target.filters:
        target.addFilter(_FILTER)
