"""Credentials out of every message and log line: URLs' passwords, secret-like settings, signatures.

A tracking URI such as ``http://user:s3cret@mlflow:5000`` or a presigned S3 URL would otherwise
reach error messages, task logs and the CLI's output. :func:`redact` replaces the secret part with
``***`` and leaves the rest readable (host, path, the names of the settings); the project's
configuration keys (16 hex digits) and run ids are not secrets and stay as they are.

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
#: ``NAME=value`` or ``NAME: value`` where NAME says secret, password, token or a credential key.
_SECRET_SETTING = re.compile(
    r"(?P<head>\b[A-Za-z0-9_.-]*(?:SECRET|PASSWORD|PASSWD|TOKEN|CREDENTIAL|ACCESS_KEY|API_KEY|AUTH)"
    r"[A-Za-z0-9_.-]*\s*[=:]\s*['\"]?)(?P<secret>(?:(?:Bearer|Basic)\s+)?[^\s'\"&,;]+)", re.IGNORECASE)
#: query parameters of presigned URLs and bearer tokens.
_SIGNED_QUERY = re.compile(r"(?P<head>[?&](?:X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|"
                           r"Signature|sig|token|access_token)=)(?P<secret>[^&\s]+)", re.IGNORECASE)
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<secret>[A-Za-z0-9._~+/=-]{8,})")


def redact(text: str) -> str:
    """``text`` with passwords, tokens, secret keys and URL signatures replaced by ``***``."""
    if not isinstance(text, str):
        text = str(text)
    for pattern in (_URL_PASSWORD, _SIGNED_QUERY, _SECRET_SETTING, _BEARER):
        text = pattern.sub(lambda m: m.group("head") + MASK, text)
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
