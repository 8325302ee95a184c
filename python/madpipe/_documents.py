"""Profiles and plans: the two JSON documents the planner reads and writes (docs/formats.md)."""

from __future__ import annotations

import copy
import json
import os
import typing

from . import _madpipe, _summary

PathLike = typing.Union[str, "os.PathLike[str]"]


class _Document:
    """A validated JSON document; the C++ reader checks it and names the file and field at fault."""

    def __init__(self, data: dict[str, typing.Any], *, file: PathLike = "") -> None:
        if not isinstance(data, dict):
            raise TypeError(f"{type(self).__name__} expects a dict (the parsed JSON), got {type(data).__name__}")
        self.file = str(file)
        self._data = json.loads(self._check(json.dumps(data), self.file))

    @staticmethod
    def _check(text: str, file: str) -> str:
        """The document's JSON text validated and normalized by the C++ reader."""
        raise NotImplementedError

    @classmethod
    def load(cls: type[_D], path: PathLike) -> _D:
        """Reads and validates a JSON file; errors name the file and the field."""
        path = os.fspath(path)
        return cls(json.loads(_madpipe.read_json_file(path)), file=path)

    def to_dict(self) -> dict[str, typing.Any]:
        """The document as plain Python data (a copy)."""
        return copy.deepcopy(self._data)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self._data, indent=indent)

    def save(self, path: PathLike) -> None:
        """Writes the document atomically (a temporary file, then a rename)."""
        _madpipe.write_file_atomically(os.fspath(path), self.to_json(indent=1) + "\n")

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._data == other._data

    def _text(self) -> str:
        return json.dumps(self._data)


_D = typing.TypeVar("_D", bound=_Document)


class Profile(_Document):
    """A ``madpipe.profile/1`` document: what each layer of a chain costs on one device.

    Build one from a dict (``Profile(data)``), a file (``Profile.load(path)``) or by measuring a
    PyTorch chain (``madpipe.torch.profile``).
    """

    @staticmethod
    def _check(text: str, file: str) -> str:
        return _madpipe.check_profile(text, file)

    @property
    def name(self) -> str:
        return str(self._data["name"])

    @property
    def layers(self) -> list[dict[str, typing.Any]]:
        """The layers in chain order, as dicts (a copy)."""
        return copy.deepcopy(self._data["layers"])

    @property
    def input_bytes(self) -> int:
        return int(self._data["input_bytes"])

    def __len__(self) -> int:
        return len(self._data["layers"])

    def __repr__(self) -> str:
        return f"Profile({self.name!r}, {len(self)} layers)"


class Plan(_Document):
    """A ``madpipe.plan/1`` document: stages, their GPUs and the periodic schedule.

    ``madpipe.plan()`` returns one, with ``notes`` (what the planner wants the user to know),
    ``planning_seconds`` and ``profile`` (the ``Profile`` it planned, which gives ``summary()``
    and ``stage_table()`` the layers' names); ``Plan.load(path)`` reads one written by
    ``madpipe plan --output`` (``profile`` None). In a notebook a plan shows as its summary and
    its Gantt chart.
    """

    @staticmethod
    def _check(text: str, file: str) -> str:
        return _madpipe.check_plan(text, file)

    def __init__(self, data: dict[str, typing.Any], *, file: PathLike = "",
                 notes: typing.Iterable[str] = (), planning_seconds: float | None = None,
                 profile: Profile | None = None) -> None:
        super().__init__(data, file=file)
        self.notes = list(notes)
        self.planning_seconds = planning_seconds
        self.profile = profile

    @property
    def algorithm(self) -> str:
        return str(self._data["algorithm"])

    @property
    def platform(self) -> dict[str, typing.Any]:
        return copy.deepcopy(self._data["platform"])

    @property
    def stages(self) -> list[dict[str, typing.Any]]:
        """The stages in chain order, as dicts: ``id``, ``first_layer``, ``last_layer``, ``gpu``, ..."""
        return copy.deepcopy(self._data["stages"])

    @property
    def k(self) -> int:
        """Micro-batches per pattern period (the pattern is k-periodic)."""
        return int(self._data["pattern"]["k"])

    @property
    def period_ms(self) -> float:
        """The predicted time per micro-batch in the steady state (pattern period / k, plus a
        tied weight's exchange spread over the step's micro-batches where its layers are apart)."""
        return float(self._data["predicted"]["period_ms"])

    @property
    def throughput_per_s(self) -> float:
        return float(self._data["predicted"]["throughput_per_s"])

    @property
    def lower_bound_ms(self) -> float:
        """No plan on this platform can have a shorter period per micro-batch."""
        return float(self._data["predicted"]["lower_bound_period_ms"])

    @property
    def memory_bytes(self) -> list[int]:
        """The predicted memory of every GPU, in bytes."""
        return list(self._data["predicted"]["memory_bytes"])

    @property
    def is_contiguous(self) -> bool:
        """True when every GPU holds one run of consecutive stages."""
        gpus = [stage["gpu"] for stage in self._data["stages"]]
        runs = [g for i, g in enumerate(gpus) if i == 0 or gpus[i - 1] != g]
        return len(runs) == len(set(runs))

    def stage_table(self, profile: ProfileLike | None = None) -> list[dict[str, typing.Any]]:
        """One dict per stage, the rows of ``summary()``'s stage table: ``stage``,
        ``first_layer``, ``last_layer``, ``layer_names`` (its layers' names; None without a
        profile), ``gpu``, ``forward_ms``, ``backward_ms``, ``backward_weight_ms`` (the part W
        runs; None when the stage does not split its backward), ``weight_bytes``,
        ``stored_bytes`` (per micro-batch in flight), ``in_flight`` (the micro-batches whose
        activations it holds at once), ``remat`` and ``offload`` (the strategies).

        ``profile``: the profile the plan was made for (default: ``self.profile``)."""
        return _summary.stage_table(self, self._profile_or(profile))

    def gpu_table(self) -> list[dict[str, typing.Any]]:
        """One dict per GPU, the rows of ``summary()``'s memory table: ``gpu``, ``stages`` (their
        ids), ``memory_bytes`` (predicted), ``fraction_of_limit``, and what the memory holds:
        ``weight_bytes`` (the weight copies), ``activation_bytes``, ``buffer_bytes`` (send and
        receive buffers) and ``workspace_bytes``."""
        return _summary.gpu_table(self)

    def summary(self, profile: ProfileLike | None = None) -> str:
        """The summary ``madpipe plan`` prints: the platform, a table of the stages (layers,
        GPU, forward and backward ms, weights, stored bytes, micro-batches in flight), the
        period, throughput and lower bound, and a table of each GPU's memory.

        ``profile``: the profile the plan was made for (default: ``self.profile``), for the
        layers' names and the bound compute alone allows; without one, they are left out."""
        return _summary.summary_text(self, self._profile_or(profile))

    def to_svg(self, path: PathLike | None = None, *, micro_batches: int = 0) -> str:
        """The Gantt chart of one training step, as ``madpipe show --plan FILE --svg OUT`` draws
        it: a row per GPU and link, bars coloured by stage. ``micro_batches``: the step's (0:
        enough for the steady state). Returns the SVG document; with ``path``, also writes it
        there atomically (a temporary file, then a rename)."""
        svg = str(_madpipe.plan_svg(self._text(), self.file, int(micro_batches)))
        if path is not None:
            _madpipe.write_file_atomically(os.fspath(path), svg)
        return svg

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def _repr_html_(self) -> str:
        return _summary.summary_html(self, self.profile) + self.to_svg()

    def _profile_or(self, profile: ProfileLike | None) -> Profile | None:
        return self.profile if profile is None else as_profile(profile)

    def __repr__(self) -> str:
        stages = len(self._data['stages'])
        return (f"Plan({self.algorithm}, {stages} stage{'s' if stages != 1 else ''} on "
                f"{self._data['platform']['gpus']} GPUs, {self.period_ms:.3f} ms per micro-batch)")


ProfileLike = typing.Union[Profile, typing.Dict[str, typing.Any], str, "os.PathLike[str]"]
PlanLike = typing.Union[Plan, typing.Dict[str, typing.Any], str, "os.PathLike[str]"]


def as_profile(profile: ProfileLike) -> Profile:
    """A Profile from a Profile, a dict or a path."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, dict):
        return Profile(profile)
    if isinstance(profile, (str, os.PathLike)):
        return Profile.load(profile)
    raise TypeError(f"profile: expected a madpipe.Profile, a dict or a path, got {type(profile).__name__}")


def as_plan(plan: PlanLike) -> Plan:
    """A Plan from a Plan, a dict or a path."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return Plan(plan)
    if isinstance(plan, (str, os.PathLike)):
        return Plan.load(plan)
    raise TypeError(f"plan: expected a madpipe.Plan, a dict or a path, got {type(plan).__name__}")


def read_profile(path: PathLike) -> Profile:
    """Reads and validates a ``madpipe.profile/1`` file."""
    return Profile.load(path)


def read_plan(path: PathLike) -> Plan:
    """Reads a ``madpipe.plan/1`` file (its structure is checked; ``validate`` checks its rules)."""
    return Plan.load(path)
