"""Profiles and plans: the two JSON documents the planner reads and writes (docs/formats.md)."""

import copy
import json
import os

from . import _madpipe


class _Document:
    """A validated JSON document; the C++ reader checks it and names the file and field at fault."""

    _check = None  # the _madpipe function that validates and normalizes the JSON text

    def __init__(self, data, *, file=""):
        if not isinstance(data, dict):
            raise TypeError(f"{type(self).__name__} expects a dict (the parsed JSON), got {type(data).__name__}")
        self.file = str(file)
        self._data = json.loads(type(self)._check(json.dumps(data), self.file))

    @classmethod
    def load(cls, path):
        """Reads and validates a JSON file; errors name the file and the field."""
        path = os.fspath(path)
        return cls(json.loads(_madpipe.read_json_file(path)), file=path)

    def to_dict(self):
        """The document as plain Python data (a copy)."""
        return copy.deepcopy(self._data)

    def to_json(self, indent=None):
        return json.dumps(self._data, indent=indent)

    def save(self, path):
        """Writes the document atomically (a temporary file, then a rename)."""
        _madpipe.write_file_atomically(os.fspath(path), self.to_json(indent=1) + "\n")

    def __eq__(self, other):
        return type(self) is type(other) and self._data == other._data

    def _text(self):
        return json.dumps(self._data)


class Profile(_Document):
    """A ``madpipe.profile/1`` document: what each layer of a chain costs on one device.

    Build one from a dict (``Profile(data)``), a file (``Profile.load(path)``) or by measuring a
    PyTorch chain (``madpipe.torch.profile``).
    """

    _check = staticmethod(_madpipe.check_profile)

    @property
    def name(self):
        return self._data["name"]

    @property
    def layers(self):
        """The layers in chain order, as dicts (a copy)."""
        return copy.deepcopy(self._data["layers"])

    @property
    def input_bytes(self):
        return self._data["input_bytes"]

    def __len__(self):
        return len(self._data["layers"])

    def __repr__(self):
        return f"Profile({self.name!r}, {len(self)} layers)"


class Plan(_Document):
    """A ``madpipe.plan/1`` document: stages, their GPUs and the periodic schedule.

    ``madpipe.plan()`` returns one, with ``notes`` (what the planner wants the user to know) and
    ``planning_seconds``; ``Plan.load(path)`` reads one written by ``madpipe plan --output``.
    """

    _check = staticmethod(_madpipe.check_plan)

    def __init__(self, data, *, file="", notes=(), planning_seconds=None):
        super().__init__(data, file=file)
        self.notes = list(notes)
        self.planning_seconds = planning_seconds

    @property
    def algorithm(self):
        return self._data["algorithm"]

    @property
    def platform(self):
        return copy.deepcopy(self._data["platform"])

    @property
    def stages(self):
        """The stages in chain order, as dicts: ``id``, ``first_layer``, ``last_layer``, ``gpu``, ..."""
        return copy.deepcopy(self._data["stages"])

    @property
    def k(self):
        """Micro-batches per pattern period (the pattern is k-periodic)."""
        return self._data["pattern"]["k"]

    @property
    def period_ms(self):
        """The predicted time per micro-batch in the steady state (pattern period / k, plus a
        tied weight's exchange spread over the step's micro-batches where its layers are apart)."""
        return self._data["predicted"]["period_ms"]

    @property
    def throughput_per_s(self):
        return self._data["predicted"]["throughput_per_s"]

    @property
    def lower_bound_ms(self):
        """No plan on this platform can have a shorter period per micro-batch."""
        return self._data["predicted"]["lower_bound_period_ms"]

    @property
    def memory_bytes(self):
        """The predicted memory of every GPU, in bytes."""
        return list(self._data["predicted"]["memory_bytes"])

    @property
    def is_contiguous(self):
        """True when every GPU holds one run of consecutive stages."""
        gpus = [stage["gpu"] for stage in self._data["stages"]]
        runs = [g for i, g in enumerate(gpus) if i == 0 or gpus[i - 1] != g]
        return len(runs) == len(set(runs))

    def __repr__(self):
        stages = len(self._data['stages'])
        return (f"Plan({self.algorithm}, {stages} stage{'s' if stages != 1 else ''} on "
                f"{self._data['platform']['gpus']} GPUs, {self.period_ms:.3f} ms per micro-batch)")


def as_profile(profile):
    """A Profile from a Profile, a dict or a path."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, dict):
        return Profile(profile)
    if isinstance(profile, (str, os.PathLike)):
        return Profile.load(profile)
    raise TypeError(f"profile: expected a madpipe.Profile, a dict or a path, got {type(profile).__name__}")


def as_plan(plan):
    """A Plan from a Plan, a dict or a path."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return Plan(plan)
    if isinstance(plan, (str, os.PathLike)):
        return Plan.load(plan)
    raise TypeError(f"plan: expected a madpipe.Plan, a dict or a path, got {type(plan).__name__}")


def read_profile(path):
    """Reads and validates a ``madpipe.profile/1`` file."""
    return Profile.load(path)


def read_plan(path):
    """Reads a ``madpipe.plan/1`` file (its structure is checked; ``validate`` checks its rules)."""
    return Plan.load(path)
