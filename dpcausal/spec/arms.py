"""Treatment arms declared in a command's section: two (treated/control) or K ≥ 3 (``arms``).

Every label comes from the spec (public), never from the data: a released policy or contrast names
them, and a row whose treatment is none of them is refused by the data checks
(:mod:`dpcausal.preprocess`), never dropped.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import model_validator

from dpcausal.spec.model import ArmLabel, StrictModel

MULTI_ARM_REFUSAL = (
    "{section}.arms: {command} has no method for more than two treatment arms (no published "
    "method with a proof: {why}); collapse the arms into two before the run and declare them as "
    "{section}.treated and {section}.control, or select among K-arm policies with select-policy "
    "(select_policy.arms, experimental)"
)
"""The refusal of ``arms`` by a command whose method is binary (checked on the spec, before any
row is read)."""
MAX_ARMS = 100
"""The most arms a spec may declare (arm indices are stored as int8)."""


def same_label(a: Any, b: Any) -> bool:
    """Whether two declared labels are the same value (True is not 1, "1" is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return bool(a == b)


def label_index(labels: tuple[ArmLabel, ...], value: Any) -> int | None:
    """The index of ``value`` among ``labels`` (:func:`same_label`), or None."""
    return next((i for i, lab in enumerate(labels) if same_label(lab, value)), None)


def refuse_arms(section: str, command: str, why: str, data: Any) -> None:
    """Raise the :data:`MULTI_ARM_REFUSAL` when a binary command's section has ``arms``."""
    if isinstance(data, dict) and "arms" in data:
        raise ValueError(MULTI_ARM_REFUSAL.format(section=section, command=command, why=why))


class MultiArms(StrictModel):
    """A command section whose method takes two arms (``treated``/``control``) or K ≥ 3
    (``arms``); exactly one of ``treated`` and ``arms`` is given.

    Subclasses set ``section`` and ``control_role`` (what ``control`` means with ``arms``, or
    None when it has no meaning there).
    """

    section: ClassVar[str] = "section"
    control_role: ClassVar[str | None] = None
    treated: ArmLabel | None = None
    """Two arms: the treatment column's value that means 'treated', as it appears in the data (a
    number, true/false or a text label); public. Give either treated (two arms) or arms."""
    control: ArmLabel | None = None
    """Two arms: the other arm's value; defaults to 0 when treated is 1 (false when treated is
    true), and is required otherwise. A row whose treatment is none of the declared labels is
    refused, never dropped."""
    arms: list[ArmLabel] | None = None
    """K ≥ 3 arms: every value of the treatment column, as it appears in the data (numbers,
    true/false or text labels; distinct; public, from the protocol, never from the data). A row
    holding any other value is refused, never dropped. Give either arms or treated."""

    @model_validator(mode="after")
    def _arms(self) -> MultiArms:
        sec = self.section
        if self.arms is not None:
            if self.treated is not None:
                raise ValueError(f"give either {sec}.treated (two arms) or {sec}.arms (K ≥ 3 "
                                 "arms), not both")
            labels = tuple(self.arms)
            if len(labels) < 3:
                raise ValueError(f"{sec}.arms must list at least three arms; for two arms use "
                                 f"{sec}.treated and {sec}.control")
            if len(labels) > MAX_ARMS:
                raise ValueError(f"{sec}.arms may list at most {MAX_ARMS} arms")
            if any(label_index(labels, v) != i for i, v in enumerate(labels)):
                raise ValueError(f"{sec}.arms must list distinct labels")
            if self.control is not None:
                if self.control_role is None:
                    raise ValueError(f"{sec}.control is not used with {sec}.arms; remove it")
                if label_index(labels, self.control) is None:
                    raise ValueError(f"{sec}.control must be one of {sec}.arms "
                                     f"({self.control_role})")
            return self
        if self.treated is None:
            raise ValueError(f"{sec}.treated (two arms) or {sec}.arms (K ≥ 3 arms) is required")
        if self.control is not None and same_label(self.control, self.treated):
            raise ValueError(f"{sec}.control must differ from {sec}.treated")
        if self.control is None and not (isinstance(self.treated, bool) or self.treated == 1):
            raise ValueError(f"{sec}.control is required unless {sec}.treated is 1 or true")
        return self

    @property
    def multi_arm(self) -> bool:
        """True with K ≥ 3 declared ``arms``."""
        return self.arms is not None

    def control_label(self) -> ArmLabel:
        """Two arms: the control arm's label. With ``arms``: the declared control (the spec
        model checks it is given where it is needed)."""
        if self.control is not None:
            return self.control
        if self.arms is not None:
            raise ValueError(f"{self.section}.control is not set")
        if isinstance(self.treated, bool):
            return not self.treated
        return 0

    def labels(self) -> tuple[ArmLabel, ...]:
        """Every declared arm: ``arms`` in order, or (treated, control)."""
        if self.arms is not None:
            return tuple(self.arms)
        assert self.treated is not None  # the validator requires one of the two
        return self.treated, self.control_label()
