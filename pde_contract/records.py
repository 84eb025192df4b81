"""The words the shared database's records hold where a column takes one of a few values: a task's
stage, a prompt's status and source, an episode's status, a label's source. The store's rows carry
them (``pde_storage.rows``); the loop, the supervisor and the page compare with them.

Each is a ``StrEnum``: a member is its word (``EpisodeStatus.LABELLED == "labelled"``), so JSON, SQL
and the database columns hold the same strings as before, and a caller may still pass the word.
The store refuses a word that is not a member, in an argument and in a row it reads."""

from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """A task's PDE stage (Algorithm 1), and the stage each episode ran in."""

    BOOTSTRAP = "bootstrap"
    """prompt-posterior search: the policy is frozen while candidate prompts are compared"""
    RL = "rl"
    """training on the canonical prompt and the pool; the pool is frozen"""


class PromptStatus(StrEnum):
    CANONICAL = "canonical"
    """the task's own instruction; its status never changes"""
    CANDIDATE = "candidate"
    """proposed, awaiting its N labelled rollouts"""
    POOL = "pool"
    """admitted: its measured success reached eta"""
    REJECTED = "rejected"


class PromptSource(StrEnum):
    """Who wrote a prompt."""

    CANONICAL = "canonical"
    VLM = "vlm"
    OFFLINE = "offline"
    """a rule-based proposer (paraphrases, scripted wordings): no VLM involved"""
    OPERATOR = "operator"


class EpisodeStatus(StrEnum):
    """running -> awaiting_label -> labelled, or aborted; an ended episode can be discarded (kept,
    left out of training and statistics) and restored."""

    RUNNING = "running"
    AWAITING_LABEL = "awaiting_label"
    LABELLED = "labelled"
    ABORTED = "aborted"
    DISCARDED = "discarded"


class LabelSource(StrEnum):
    """Operator and simulator labels decide an episode's success; a VLM label is a proposal."""

    OPERATOR = "operator"
    SIMULATOR = "simulator"
    VLM = "vlm"
