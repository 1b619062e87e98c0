"""XLA's compiled programs read from their HLO text, for op-level profiles of the
frameworks that compile with XLA (JAX, Keras on JAX): a profiler names each device
event after an HLO instruction (`hlo_op`), and most instructions are fusions named by
what XLA happened to fuse (`ynn_fusion.11`, `transpose_copy_fusion.7`), which says
nothing of the model. `op_names` renames each instruction by the op it is built
around (a fusion: the fused instruction of the highest kind in KINDS, so a fusion
holding a convolution and its bias add is a convolution) with that instruction's
metadata: its op_name (the framework's name stack, which says whether it is in the
backward pass) and the function whose source line made it. `pool_tasks` gives the
work that XLA:CPU's instructions hand to its thread pool back to them. No framework is
imported here: the text and the trace are the framework's to fetch."""
from __future__ import annotations

import math
import re
from collections import defaultdict, deque

# The kinds of instruction, highest first: a fusion is named by its fused instruction
# of the highest kind. Each (kind, regex on the opcode, or a custom call's target: a
# GPU's convolutions and products are custom calls to cuDNN and cuBLAS); None matches
# any opcode that no other kind does.
KINDS = (
    ("convolution", r"^convolution$|\$conv"),
    ("dot", r"^dot$|gemm|matmul"),
    ("pooling", r"^(reduce-window|select-and-scatter)$"),
    ("collective", r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|"
                   r"collective-broadcast)(-start|-done)?$|^(send|recv)(-done)?$"),
    ("control flow", r"^(while|conditional|call|async-start|async-update|async-done)$"),
    ("reduce", r"^reduce$"),
    ("elementwise", None),
    ("data movement", r"^(parameter|constant|bitcast|copy|copy-start|copy-done|transpose|"
                      r"reshape|broadcast|slice|dynamic-slice|dynamic-update-slice|"
                      r"concatenate|pad|reverse|tuple|get-tuple-element|iota|convert|"
                      r"bitcast-convert)$"),
)
_KIND_RE = [(kind, re.compile(rx)) for kind, rx in KINDS if rx is not None]
_DEFAULT = next(kind for kind, rx in KINDS if rx is None)
_RANK = {kind: i for i, (kind, _) in enumerate(KINDS)}

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')
_FRAME = re.compile(r"\bstack_frame_id=(\d+)")
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
_TARGET = re.compile(r'\bcustom_call_target="([^"]*)"')
_OPERAND = re.compile(r"%([\w.\-]+)")
_SECTION_ROW = re.compile(r'^(\d+)\s+(?:"((?:[^"\\]|\\.)*)"|\{(.*)\})\s*$')


def kind_of(opcode: str) -> str:
    """The kind (KINDS) of an opcode or a custom call's target."""
    for kind, rx in _KIND_RE:
        if rx.search(opcode):
            return kind
    return _DEFAULT


def _matching(s: str, i: int) -> int:
    """The index just past the bracket that closes the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] in "([{":
            depth += 1
        elif s[j] in ")]}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def _instruction(rest: str) -> dict:
    """`shape opcode(operands), attributes` -> opcode, operand names, attributes."""
    i = _matching(rest, 0) if rest.startswith("(") else rest.find(" ")   # past the shape
    shape, rest = rest[:i], rest[i:].lstrip()
    paren = rest.find("(")
    opcode = rest[:paren].strip()
    end = _matching(rest, paren)
    attrs = rest[end:]
    target = _TARGET.search(attrs)
    op_name, frame, calls = _OP_NAME.search(attrs), _FRAME.search(attrs), _CALLS.search(attrs)
    return {"opcode": target.group(1) if opcode == "custom-call" and target else opcode,
            "operands": _OPERAND.findall(rest[paren:end]),
            "op_name": op_name.group(1) if op_name else "",
            "frame": int(frame.group(1)) if frame else None,
            "calls": calls.group(1) if calls else None,
            # the result's bytes (a tuple's summed)
            "bytes": sum(_ELEMENT_BYTES[t] * math.prod(int(d) for d in dims.split(",") if d)
                         for t, dims in _ARRAY.findall(shape))}


def parse(text: str) -> tuple[dict, dict]:
    """HLO text -> ({computation: [(instruction name, its fields), ...]}, {stack frame id:
    the name of the function whose line it is})."""
    comps: dict[str, list] = {}
    sections: dict[str, dict] = defaultdict(dict)
    current = section = None
    for line in text.splitlines():
        if current is not None:
            if line.strip() == "}":
                current = None
                continue
            m = _INSTR.match(line)
            if m:
                comps[current].append((m.group(1), _instruction(m.group(2))))
            continue
        head = _HEADER.match(line)
        if head and not line.startswith("HloModule"):
            current = head.group(1)
            comps[current] = []
            continue
        row = _SECTION_ROW.match(line)
        if row and section:
            sections[section][int(row.group(1))] = (row.group(2) if row.group(2) is not None
                                                   else dict(re.findall(r"(\w+)=(\d+)", row.group(3))))
        elif line.strip() and " " not in line.strip():
            section = line.strip()              # FileNames, FunctionNames, FileLocations, ...
    functions = sections["FunctionNames"]
    locations = sections["FileLocations"]
    frames = {}
    for fid, frame in sections["StackFrames"].items():
        loc = locations.get(int(frame.get("file_location_id", 0)), {})
        name = functions.get(int(loc.get("function_name_id", 0)) if loc else 0)
        if name:
            frames[fid] = name
    return comps, frames


def op_names(text: str, backward: str) -> dict[str, str]:
    """Every instruction of an HLO module -> "KIND[ backward]: OP_NAME[ @ FUNCTION]":
    KIND the instruction's (a fusion's: its fused instructions' highest, KINDS), OP_NAME
    the metadata of the instruction that gave the kind (the one nearest the fusion's
    root, where several did), or where XLA dropped the metadata (layout copies it
    inserted) that of the instruction's nearest user; " backward" where OP_NAME contains
    `backward` (the framework's mark of the backward pass); FUNCTION the innermost
    function of its source (the frame XLA recorded), where there is one."""
    comps, frames = parse(text)
    by_name = {name: f for body in comps.values() for name, f in body}

    def lead(f, seen=()):
        """(kind, the fields of the instruction that gave it) of an instruction."""
        if f["opcode"] != "fusion" or f["calls"] not in comps or f["calls"] in seen:
            return kind_of(f["opcode"]), f
        best = None
        for _, g in comps[f["calls"]]:
            kind, src = lead(g, seen + (f["calls"],))
            rank = _RANK[kind]
            # ties: the later instruction (nearer the root) with metadata
            if best is None or rank < best[0] or (rank == best[0] and (src["op_name"] or not best[2]["op_name"])):
                best = (rank, kind, src)
        if best is None:
            return kind_of("parameter"), f
        return best[1], best[2] if best[2]["op_name"] else f

    users = defaultdict(list)
    for body in comps.values():
        for name, f in body:
            for op in f["operands"]:
                users[op].append(name)

    def described(name):
        """The nearest instruction (itself, else its users, breadth first) with metadata."""
        queue, seen = deque([name]), {name}
        while queue:
            n = queue.popleft()
            if by_name[n]["op_name"]:
                return by_name[n]
            for u in users[n]:
                if u not in seen and u in by_name:
                    seen.add(u)
                    queue.append(u)
        return None

    out = {}
    for name, f in by_name.items():
        kind, src = lead(f)
        if not src["op_name"]:
            src = described(name) or src
        label = kind + (" backward" if backward and backward in src["op_name"] else "")
        text_ = f"{label}: {src['op_name'] or name}"
        if src["frame"] in frames:
            text_ += f" @ {frames[src['frame']]}"
        out[name] = text_
    return out


# the bytes of an element of each HLO type a collective may carry
_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f16": 2, "bf16": 2, "s16": 2, "u16": 2,
                  "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}
_ARRAY = re.compile(r"\b(" + "|".join(_ELEMENT_BYTES) + r")\[([\d,]*)\]")
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")


def collective_bytes(text: str) -> dict[str, int]:
    """{collective kind: the bytes of its results} over a compiled program's HLO text, the
    synchronous collectives (XLA:CPU's: an all-gather's gathered arrays, an all-reduce's
    reduced ones, a reduce-scatter's part on one device), every kind of COLLECTIVES named."""
    out = dict.fromkeys(COLLECTIVES, 0)
    for comp in parse(text)[0].values():
        for _, ins in comp:
            if ins["opcode"] in out:
                out[ins["opcode"]] += ins["bytes"]
    return out


_ENTRY = re.compile(r"^ENTRY\s+%?([\w.\-]+)", re.M)
_ROOT = re.compile(r"^\s*ROOT\s+%?([\w.\-]+)\s*=", re.M)
# what a value may pass through unchanged (a layout copy, a bitcast)
_PASS_THROUGH = ("copy", "bitcast")
# operands that carry no gradient: the update's own parameter, a scalar's source
_NOT_GRADIENT = ("parameter", "constant", "partition-id", "replica-id")


def update_gradient_bytes(text: str, whole: list[int], first: int = 0) -> list[int] | None:
    """A compiled training step whose results from index `first` on are its updated
    parameters (p - lr g, `whole` their bytes as one array each; Keras's step returns its
    logs first): for each, the bytes of the gradient its update takes on one device, read
    from the partitioned program: the largest operand of the instruction computing it (on
    XLA:CPU a loop fusion), each operand followed through copies and bitcasts, that is not
    one of the program's parameters, a constant or the device's index. Its g, whole where
    the update slices its part out of an all-reduced gradient, or the part. None where any
    result does not read so (the operand neither the updated part's bytes nor the whole
    parameter's: XLA fused the gradient's own computation into the update, whose operands
    are then the batch's activations or partial sums, not the gradient)."""
    comps, _ = parse(text)
    entry = _ENTRY.search(text)
    root = _ROOT.search(text, entry.end()) if entry else None
    body = dict(comps.get(entry.group(1), ())) if entry else {}
    if root is None or root.group(1) not in body:
        return None

    def source(name):
        f = body[name]
        while f["opcode"] in _PASS_THROUGH and f["operands"] and f["operands"][0] in body:
            f = body[f["operands"][0]]
        return f
    result = body[root.group(1)]
    if result["opcode"] != "tuple" or len(result["operands"]) < first + len(whole):
        return None
    out = []
    for name, w in zip(result["operands"][first:], whole):
        update = source(name)
        g = max((body[o]["bytes"] for o in update["operands"]
                 if o in body and source(o)["opcode"] not in _NOT_GRADIENT), default=0)
        if g not in (update["bytes"], w):
            return None
        out.append(g)
    return out


def step_figures(text: str, whole: list[int], devices: int, first: int = 0) -> dict:
    """A compiled training step's record figures, read from its HLO: the bytes its
    collectives carry (collective_bytes) and, where every update reads so, each of its
    `devices`' gradient bytes (grad_bytes: the same program on every device)."""
    out = {"collective_bytes": collective_bytes(text)}
    grads = update_gradient_bytes(text, whole, first)
    if grads is not None:
        out["grad_bytes"] = [sum(grads)] * devices
    return out


def module_id(serialized: bytes) -> int:
    """The unique id of a serialized HloModuleProto (its field 5, int64; 0 when unset),
    which a profiler's events carry as `program_id`: module names repeat (every jitted
    `step` is jit_step), ids do not."""
    i = 0

    def varint():
        nonlocal i
        value = shift = 0
        while True:
            b = serialized[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value
    while i < len(serialized):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
            if field == 5:
                return value - (1 << 64) if value >= 1 << 63 else value
        elif wire == 2:
            length = varint()          # read before i moves past it
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"not an HloModuleProto: wire type {wire} at byte {i}")
    return 0


# XLA:CPU's thread-pool marks in a trace: a task scheduled (on the scheduling thread,
# its flow id `_p`), and a task run on a worker, between a start and a stop mark (the
# start carrying the same flow id as `_c`); the executor that runs the next ready
# instructions, where a worker turns from a task to them
POOL_SCHEDULED = "ThreadpoolListener::Record"
POOL_START = "ThreadpoolListener::StartRegion"
POOL_STOP = "ThreadpoolListener::StopRegion"
EXECUTOR = "ThunkExecutor::Execute"


def pool_tasks(events: list[dict]) -> list[dict]:
    """The thread-pool tasks of XLA's instructions as events of their own: an instruction
    that splits its work (an Eigen convolution, a partitioned loop) runs most of it in
    tasks on worker threads after its own event has ended, where the trace shows only
    the pool's marks. Each task is named after the op that scheduled it (the innermost
    event on the scheduling thread at its mark, an op or a task itself, through the
    flow ids), and lasts from its start mark to its stop mark, or to where the worker
    turns to the executor. events: {"name", "start", "end", "thread", "op" (True for an
    instruction's event), "flow" (the `_p` or `_c` id, where there is one)}."""
    order = sorted(events, key=lambda e: (e["start"], -(e["end"] - e["start"])))
    stacks: dict[str, list] = {}          # per thread: the enclosing events (name, end, op)
    owners: dict = {}                     # flow id -> the op that scheduled the task
    open_task: dict[str, dict] = {}
    out = []

    def close(thread, at):
        task = open_task.pop(thread, None)
        if task and at > task["start"]:
            out.append({**task, "end": at})

    for e in order:
        thread, t = e["thread"], e["start"]
        stack = stacks.setdefault(thread, [])
        while stack and stack[-1][1] <= t and stack[-1][1] != float("inf"):
            stack.pop()
        name = e["name"]
        if name == POOL_SCHEDULED:
            if stack and stack[-1][2] and e.get("flow") is not None:
                owners[e["flow"]] = stack[-1][0]
        elif name == POOL_START:
            close(thread, t)
            stack[:] = [s for s in stack if s[1] != float("inf")]
            owner = owners.pop(e.get("flow"), None)
            if owner is not None:
                open_task[thread] = {"name": owner, "start": t, "thread": thread}
                stack.append((owner, float("inf"), True))
        elif name == POOL_STOP or name.startswith(EXECUTOR):
            close(thread, t)
            stack[:] = [s for s in stack if s[1] != float("inf")]
            if name.startswith(EXECUTOR):
                stack.append((name, e["end"], False))
        elif e["end"] > t:
            stack.append((name, e["end"], bool(e.get("op"))))
    return out
