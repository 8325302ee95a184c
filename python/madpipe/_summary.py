"""What ``madpipe plan`` prints about a plan, from Python: ``Plan.summary()``, ``stage_table()``,
``gpu_table()`` and the notebook's HTML. The figures beyond the plan's JSON (micro-batches in
flight, the memory breakdown, ...) come from the planner library (python/src/plan_views.hpp)."""

from __future__ import annotations

import dataclasses
import html
import typing

from . import _madpipe
from ._errors import Error

if typing.TYPE_CHECKING:
    from ._documents import Plan, Profile

_LABEL_WIDTH = 13  # "lower bound  ": the labels of the summary's lines, as the command's


def _details(plan: Plan, profile: Profile | None) -> dict[str, typing.Any]:
    if profile is None:
        return dict(_madpipe.plan_details(plan._text(), plan.file, None, ""))
    return dict(_madpipe.plan_details(plan._text(), plan.file, profile._text(), profile.file))


def _layer_names(plan: Plan, profile: Profile | None) -> list[str] | None:
    if profile is None:
        return None
    names = [str(layer["name"]) for layer in profile._data["layers"]]
    last_layer = plan._data["stages"][-1]["last_layer"]
    if len(names) <= last_layer:
        raise Error(f"profile: {profile.name} has {len(names)} layers, the plan's stages end at layer "
                    f"{last_layer}", field="profile",
                    problem=f"{profile.name} has {len(names)} layers, the plan's stages end at layer {last_layer}")
    return names


def stage_table(plan: Plan, profile: Profile | None,
                details: dict[str, typing.Any] | None = None) -> list[dict[str, typing.Any]]:
    details = details or _details(plan, profile)
    names = _layer_names(plan, profile)
    rows = []
    for stage, in_flight in zip(plan._data["stages"], details["in_flight"]):
        first, last = stage["first_layer"], stage["last_layer"]
        rows.append({
            "stage": stage["id"], "first_layer": first, "last_layer": last,
            "layer_names": names[first:last + 1] if names is not None else None,
            "gpu": stage["gpu"], "forward_ms": stage["forward_ms"], "backward_ms": stage["backward_ms"],
            "backward_weight_ms": stage.get("backward_weight_ms"),
            "weight_bytes": stage["weight_bytes"], "stored_bytes": stage["stored_bytes"],
            "in_flight": in_flight, "remat": stage["remat"]["strategy"],
            "offload": stage["offload"]["strategy"],
        })
    return rows


def gpu_table(plan: Plan, details: dict[str, typing.Any] | None = None) -> list[dict[str, typing.Any]]:
    details = details or _details(plan, None)
    limit = plan._data["platform"]["memory_bytes"]
    rows = []
    for gpu, (total, memory) in enumerate(zip(plan._data["predicted"]["memory_bytes"], details["memory"])):
        rows.append({
            "gpu": gpu, "stages": [s["id"] for s in plan._data["stages"] if s["gpu"] == gpu],
            "memory_bytes": total, "fraction_of_limit": total / limit,
            "weight_bytes": memory["weights"], "activation_bytes": memory["activations"],
            "buffer_bytes": memory["buffers"], "workspace_bytes": memory["workspace"],
        })
    return rows


@dataclasses.dataclass
class _Table:
    """Columns separated by two spaces, padded to the widest cell, as the command's tables."""
    titles: list[str]
    left: set[str]  # the titles of the left-aligned columns; the others are right-aligned
    rows: list[list[str]]

    def text(self) -> list[str]:
        widths = [max([len(title)] + [len(row[c]) for row in self.rows]) for c, title in enumerate(self.titles)]

        def line(cells: list[str]) -> str:
            parts = []
            for c, (cell, title) in enumerate(zip(cells, self.titles)):
                last = c + 1 == len(self.titles)
                if title in self.left:
                    parts.append(cell if last else cell.ljust(widths[c]))
                else:
                    parts.append(cell.rjust(widths[c]))
            return "  ".join(parts)
        return [line(self.titles)] + [line(row) for row in self.rows]

    def html(self) -> str:
        def cells(tag: str, row: list[str]) -> str:
            return "".join(f'<{tag} style="text-align:{"left" if title in self.left else "right"}">'
                           f"{html.escape(cell)}</{tag}>" for cell, title in zip(row, self.titles))
        return ("<table><thead><tr>" + cells("th", self.titles) + "</tr></thead><tbody>"
                + "".join("<tr>" + cells("td", row) + "</tr>" for row in self.rows) + "</tbody></table>")


def _bytes(value: float) -> str:
    return str(_madpipe.format_bytes(value))


def _ms(value: float) -> str:
    return str(_madpipe.format_ms(value))


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _labelled(label: str, text: str) -> str:
    return label.ljust(_LABEL_WIDTH) + text


def _layers_text(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}..{last}"


def _stages_table(rows: list[dict[str, typing.Any]]) -> _Table:
    named = rows[0]["layer_names"] is not None
    splits = any(row["backward_weight_ms"] is not None for row in rows)
    saves = any(row["remat"] != "none" or row["offload"] != "none" for row in rows)
    titles = (["stage", "layers"] + (["names"] if named else []) + ["gpu", "F ms", "B ms"]
              + (["of which W"] if splits else []) + ["weights", "stored", "in flight"]
              + (["saves memory by"] if saves else []))
    table = _Table(titles, {"layers", "names", "saves memory by"}, [])
    for row in rows:
        cells = [str(row["stage"]), _layers_text(row["first_layer"], row["last_layer"])]
        if named:
            names = row["layer_names"]
            cells.append(names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}")
        cells += [str(row["gpu"]), f"{row['forward_ms']:.2f}", f"{row['backward_ms']:.2f}"]
        if splits:
            w = row["backward_weight_ms"]
            cells.append("-" if w is None else f"{w:.2f}")
        cells += [_bytes(row["weight_bytes"]), _bytes(row["stored_bytes"]), str(row["in_flight"])]
        if saves:
            recomputes, offloads = row["remat"] != "none", row["offload"] != "none"
            cells.append("recomputing, offloading" if recomputes and offloads else
                         "recomputing" if recomputes else "offloading" if offloads else "-")
        table.rows.append(cells)
    return table


def _gpus_table(rows: list[dict[str, typing.Any]]) -> _Table:
    table = _Table(["gpu", "stages", "memory", "of limit", "weights", "activations", "buffers", "workspace"],
                   {"stages"}, [])
    for row in rows:
        table.rows.append([str(row["gpu"]), ",".join(map(str, row["stages"])) or "-",
                           _bytes(row["memory_bytes"]), f"{100 * row['fraction_of_limit']:.0f}%",
                           _bytes(row["weight_bytes"]), _bytes(row["activation_bytes"]),
                           _bytes(row["buffer_bytes"]), _bytes(row["workspace_bytes"])])
    return table


def _node_crossing_lines(details: dict[str, typing.Any]) -> list[str]:
    if details["nodes"] < 2:
        return []
    label = "across nodes "
    lines = [f"stages {c['stage']} -> {c['stage'] + 1}: gpu {c['from_gpu']} (node {c['from_node']}) -> "
             f"gpu {c['to_gpu']} (node {c['to_node']}), {_bytes(c['bytes'])}, {_ms(c['transfer_ms'])} per transfer"
             for c in details["node_crossings"]]
    lines = lines or ["none: every stage boundary stays inside a node"]
    return [(label if i == 0 else " " * len(label)) + line for i, line in enumerate(lines)]


def _performance_lines(plan: Plan, details: dict[str, typing.Any]) -> list[str]:
    data = plan._data
    predicted, pattern = data["predicted"], data["pattern"]
    period = _ms(predicted["period_ms"]) + " per micro-batch"
    if pattern["k"] > 1:
        period += f" (pattern period {_ms(pattern['period_ms'])} for k = {pattern['k']} micro-batches)"
    bound = predicted["lower_bound_period_ms"]
    bound_text = _ms(bound) + " per micro-batch"
    compute_bound = details["compute_bound_ms"]
    if compute_bound is not None and bound > compute_bound * (1 + 1e-9):
        bound_text += f" (memory: micro-batches in flight; compute alone {_ms(compute_bound)})"
    bound_text += f"; period / lower bound = {predicted['period_ms'] / bound:.3f}"
    lines = [_labelled("period", period),
             _labelled("throughput", f"{predicted['throughput_per_s']:.2f} micro-batches/s"),
             _labelled("lower bound", bound_text)]
    step = predicted.get("step")
    if step is not None:
        step_bound = details["step_lower_bound_ms"]
        ratio = step["time_ms"] / step_bound if step_bound > 0 else 0
        count = step["micro_batches"]
        lines.append(_labelled("step", f"{_ms(step['time_ms'])} for {count} micro-batch{'' if count == 1 else 'es'} "
                                       f"(warm-up and drain included), {100 * step['bubble']:.1f}% bubble; "
                                       f"lower bound {_ms(step_bound)}, step / lower bound = {ratio:.3f}"))
        if "step_order" in data:
            lines.append(_labelled("", "each GPU in the order of the plan's step_order (a published "
                                       "schedule's or the step ILP's)"))
    time = details["time"]
    if time is not None and time["busy"]:
        tied = f"{_percent(time['tied_exchange'])} tied exchange, " if time["tied_exchange"] > 0 else ""
        lines.append(_labelled("time", f"{_percent(time['useful'])} useful compute, "
                                       f"{_percent(time['recomputation'])} recomputation, "
                                       f"{_percent(time['imbalance'])} imbalance, {tied}"
                                       f"{_percent(time['waiting'])} waiting for transfers and dependencies "
                                       f"(GPUs busy {_percent(min(time['busy']))} to "
                                       f"{_percent(max(time['busy']))} of the period)"))
    return lines


def _tied_weight_lines(plan: Plan, profile: Profile | None, details: dict[str, typing.Any]) -> list[str]:
    tied = profile._data.get("tied_weights", []) if profile is not None else []
    lines = []
    for placement in details["tied_weights"]:
        group = placement["group"]
        layers = f"group {group}"
        if profile is not None and 0 <= group < len(tied):
            layers = ", ".join(profile._data["layers"][layer]["name"] for layer in tied[group]["layers"])
        gpus = ", ".join(map(str, placement["gpus"]))
        where = (f" on gpu {gpus}, held once" if len(placement["gpus"]) == 1
                 else f" on gpus {gpus}: its gradients summed once per step")
        lines.append(_labelled("tied weight", f"{_bytes(placement['bytes'])} ({layers}){where}"))
    predicted = plan._data["predicted"]
    exchange = predicted.get("tied_exchange_ms", 0)
    if exchange > 0:
        per_step = predicted["micro_batches_per_step"]
        lines.append(_labelled("exchange", f"{_ms(exchange)} per step for the tied weights, over {per_step} "
                                           f"micro-batches per step (micro_batches): {_ms(exchange / per_step)} "
                                           "per micro-batch, in the period"))
    return lines


def _closing_lines(plan: Plan) -> list[str]:
    lines = [_labelled("memory limit", _bytes(plan._data["platform"]["memory_bytes"]) + " per GPU")]
    if plan.planning_seconds is not None:
        lines.append(_labelled("planned in", f"{plan.planning_seconds:.2f} s"))
    solver = plan._data.get("solver")
    if solver is not None:
        lines.append(_labelled("solver", f"{solver['backend']}, {solver['status']} in {solver['seconds']:.2f} s, "
                                         f"objective {_ms(solver['objective'])}, bound {_ms(solver['bound'])}, "
                                         f"gap {100 * solver['gap']:.2f}%"))
    lines += [_labelled("note", note) for note in plan.notes]
    return lines


Part = typing.Union[_Table, typing.List[str]]  # a table, or lines of text


def _parts(plan: Plan, profile: Profile | None) -> list[Part]:
    """The summary in order: tables and lines of text."""
    details = _details(plan, profile)
    data = plan._data
    stages = data["stages"]
    if profile is not None:
        device = profile._data.get("device", "")
        about = f"{profile.name} ({len(profile)} layers{', measured on ' + device if device else ''})"
    else:
        about = str(data["profile"])
    contiguous = len({s["gpu"] for s in stages}) == len(stages)
    header = [_labelled("profile", about), _labelled("platform", details["platform_text"]),
              _labelled("algorithm", f"{data['algorithm']}: {len(stages)} stages, "
                                     f"{'contiguous' if contiguous else 'non-contiguous'} allocation, "
                                     f"{data['pattern']['k']}-periodic pattern")]
    return [header + [""], _stages_table(stage_table(plan, profile, details)),
            _node_crossing_lines(details) + [""] + _performance_lines(plan, details)
            + _tied_weight_lines(plan, profile, details) + [""],
            _gpus_table(gpu_table(plan, details)), _closing_lines(plan)]


def summary_text(plan: Plan, profile: Profile | None) -> str:
    lines: list[str] = []
    for part in _parts(plan, profile):
        if isinstance(part, _Table):
            lines += part.text()
        else:
            lines += part
    return "\n".join(lines) + "\n"


def summary_html(plan: Plan, profile: Profile | None) -> str:
    pieces = []
    for part in _parts(plan, profile):
        if isinstance(part, _Table):
            pieces.append(part.html())
        elif any(part):
            pieces.append('<pre style="margin:0.5em 0">' + html.escape("\n".join(part).strip("\n")) + "</pre>")
    return '<div class="madpipe-plan">' + "".join(pieces) + "</div>"
