"""What the store refuses, as types the page can map to HTTP codes (404 / 409 / 422)."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every refusal; the message says what was wrong and what to do."""


class NotFoundError(StoreError, LookupError):
    pass


class ConflictError(StoreError):
    """The request is well formed but the current state forbids it (e.g. a second label)."""


class InvalidArgumentError(StoreError, ValueError):
    pass


class StoredValueError(StoreError):
    """A row holds a word this version does not know (written by a newer version, or by hand):
    a fault of the data, not of the request."""
