"""Neuron Explorer's Parquet schema: the tables and fields the simulator's profiles are written in.

Neuron Explorer (AWS's profiler) writes a profile as Parquet tables whose layout it versions as
``Metadata.profile_schema_version`` and describes in a ``SchemaFields`` table ("one row per
(table, field) with its type, description, unit"). This module declares the tables a simulated
profile holds with Explorer's published names, types and units (profile schema 7.4.0, Neuron SDK
2.31, tools/neuron-explorer/profile-schema-reference.rst; docs/notes/neuron-explorer-reference.md),
so a query written for Explorer's output runs on ours. Each field also says where its values come
from (``origin``): ``measured`` on the simulator, ``estimated`` by the cost model for the target
chip, or ``profile`` (a description of the profile). Fields Explorer does not have are marked
``extension``; fields of Explorer's that a simulation cannot fill are left out.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = "7.4.0"  # the published profile schema these tables follow
MEASURED, ESTIMATED, PROFILE = "measured", "estimated", "profile"
NS = "nanoseconds"
# Explorer's engine names as its documented Instruction query output spells them ("Tensor MATMUL",
# "Vector TENSOR_TENSOR"; the schema's examples write "tensor"). The simulator's DMA transfers,
# which Explorer puts in its DmaPacket table, are Instruction rows on engine "DMA" here.
ENGINE_NAMES = {"TensorE": "Tensor", "VectorE": "Vector", "ScalarE": "Scalar", "GpSimd": "GpSimd", "DMA": "DMA"}

_TYPES = {pa.int64(): ("integer", "int64"), pa.int32(): ("integer", "int32"), pa.float64(): ("number", "double"),
          pa.string(): ("string", ""), pa.bool_(): ("boolean", "")}


@dataclass(frozen=True)
class Field:
    """One column: its Explorer name, type, unit and description, and where its values come from."""

    name: str
    type: pa.DataType
    description: str
    unit: str = ""
    required: bool = False
    origin: str = ESTIMATED
    example: str = ""
    extension: bool = False  # not in Explorer's schema: ours only


@dataclass(frozen=True)
class Table:
    name: str
    description: str
    fields: tuple[Field, ...]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(f.name, f.type) for f in self.fields])


def _timeline(origin: str) -> tuple[Field, ...]:
    return (Field("start_ts", pa.int64(), "Timestamp when the activity started.", NS, True, origin),
            Field("end_ts", pa.int64(), "Timestamp when the activity ended.", NS, True, origin),
            Field("duration_ns", pa.int64(), "Duration of the activity.", NS, True, origin))


_I64, _F64, _STR, _BOOL = pa.int64(), pa.float64(), pa.string(), pa.bool_()

TABLES: dict[str, Table] = {t.name: t for t in (
    Table("Instruction", "Instructions executed on NeuronCore compute engines (kernel-language kernels: the "
          "simulator's instructions, timed by the cost model).", (
              *_timeline(ESTIMATED),
              Field("engine", _STR, "Compute engine that executed this instruction.", required=True, origin=PROFILE,
                    example="Tensor"),
              Field("opcode", _STR, "Opcode for the instruction.", required=True, origin=PROFILE, example="MATMUL"),
              Field("operands", _STR, "Input operands for the instruction (shape and dtype of its tile).",
                    required=True, origin=PROFILE),
              Field("id", _I64, "Unique identifier for this instruction execution.", required=True, origin=PROFILE),
              Field("pc", _I64, "This instruction's index on its engine within the launch.", required=True,
                    origin=PROFILE),
              Field("bir_id", _STR, "Identifier of the instruction: kernel launch and issue index (no compiler "
                    "BIR in a simulation).", required=True, origin=PROFILE, example="nki:0:17"),
              Field("pcore_idx", _I64, "Index of the physical NeuronCore within a Logical NeuronCore.",
                    origin=PROFILE),
              Field("nki_source_location", _STR, "Neuron Kernel Interface (NKI) source code location that "
                    "generated this instruction.", origin=PROFILE, example="file.py:42"),
              Field("raw_flops", _I64, "Number of floating-point operations performed by this instruction.",
                    origin=ESTIMATED),
              Field("hbm_read_bytes", _I64, "Bytes the instruction's DMA moves (reads).", origin=MEASURED),
              Field("kernel_name", _STR, "The device kernel (launch) the instruction belongs to.", origin=PROFILE,
                    extension=True),
              Field("core", _I64, "The simulated logical NeuronCore.", origin=PROFILE, extension=True),
              Field("dtype", _STR, "Data type of the instruction's tile.", origin=PROFILE, extension=True),
              Field("launch", _I64, "Which launch of its kernel in this profile (0, 1, ...).", origin=PROFILE,
                    extension=True),
              Field("program_id", _STR, "The SPMD program of a gridded launch.", origin=PROFILE, extension=True),
              Field("waited_for", _I64, "The instruction (id) this one waited for: the producer of what it reads "
                    "that finished after its engine was free (null: its engine was the bound).", origin=ESTIMATED,
                    extension=True),
          )),
    Table("ActiveTime", "A timeline of when engines are active: the merged intervals of the engine's "
          "instructions (estimated by the cost model).", (
              Field("start_ts", _I64, "Timestamp when activity on this engine starts.", NS, True),
              Field("end_ts", _I64, "Timestamp when activity on this engine ends.", NS, True),
              Field("engine", _STR, "Compute engine that this active time period corresponds to.", required=True,
                    origin=PROFILE, example="Tensor"),
              Field("pcore_idx", _I64, "Index of the physical NeuronCore within a Logical NeuronCore.",
                    required=True, origin=PROFILE),
              Field("duration_ns", _I64, "The duration of the active time period.", NS, True),
          )),
    Table("OpcodeSummary", "Instruction counts and total execution time grouped by compute engine and opcode.", (
        Field("engine", _STR, "Compute engine that executed the instructions.", required=True, origin=PROFILE,
              example="Tensor"),
        Field("opcode", _STR, "Opcode of the instructions.", required=True, origin=PROFILE, example="MATMUL"),
        Field("instruction_count", _I64, "Total number of instructions with this engine and opcode combination.",
              required=True, origin=MEASURED),
        Field("instruction_time_ns", _I64, "Total cumulative execution time of these instructions (added, not "
              "merged).", NS, True),
        Field("active_time_ns", _I64, "Duration of time when at least one of these instructions is executing.",
              NS, True),
        Field("active_time_percent", _F64, "Percentage of total execution time when at least one of these "
              "instructions is executing.", "", True),
    )),
    Table("Flow", "Dependencies between rows of the timeline tables (data through tensors, stream order, "
          "events, host syncs).", (
              Field("in_id", _I64, "Unique identifier of the predecessor.", required=True, origin=PROFILE),
              Field("out_id", _I64, "Unique identifier of the successor.", required=True, origin=PROFILE),
              Field("in_table", _STR, "Table of the predecessor.", required=True, origin=PROFILE,
                    example="instruction"),
              Field("out_table", _STR, "Table of the successor.", required=True, origin=PROFILE,
                    example="instruction"),
              Field("dependency_type", _STR, "Type of dependency from the predecessor.", origin=PROFILE,
                    example="FLOW_DEPENDENCE"),
              Field("gap_time", _I64, "The gap time between the end of the input event and the start of the "
                    "output event.", NS, origin=MEASURED),
              Field("waited_for", _STR, "For a core's stream-order edge, what the core waited for in the gap: "
                    "host sync, cpu fallback, host launch, collective or queue.", origin=MEASURED, extension=True),
          )),
    Table("SystemProfileEvents", "Framework operators, runtime calls and device kernels of the profile, "
          "measured on the simulator.", (
              Field("id", _I64, "Unique identifier for this event.", required=True, origin=PROFILE),
              Field("name", _STR, "Name of the event.", required=True, origin=PROFILE, example="aten::mm"),
              *_timeline(MEASURED),
              Field("trace_event_source", _STR, "Source of the event: neuron_rt (the runtime on the host), neuron_hw "
                    "(a simulated NeuronCore) or framework.", required=True, origin=PROFILE, example="framework"),
              Field("instance_id", _STR, "The host that produced this event.", required=True, origin=PROFILE),
              Field("process_id", _I64, "The process that produced this event (0 for device events).", required=True,
                    origin=PROFILE),
              Field("thread_id", _I64, "The thread that produced this event (0 for device events).", required=True,
                    origin=PROFILE),
              Field("nc_idx", _I64, "The simulated logical NeuronCore of a device event.", origin=PROFILE),
              Field("correlation_id", _I64, "The framework operator's correlation id that links an operator, its "
                    "runtime calls and its kernels.", origin=PROFILE, extension=True),
              Field("stack_frame_id", _I64, "The innermost user frame (StackFrame id) of the operator's Python call "
                    "stack (profiles recorded with_stack=True).", origin=PROFILE, extension=True),
              Field("module_path", _STR, "The nn.Module calls the operator ran in, outermost first.",
                    origin=PROFILE, example="GPT_0/Block_1/Linear_0", extension=True),
          )),
    Table("StackFrame", "Individual stack frames representing the call stack hierarchy for debugging and tracing "
          "execution back to source code.", (
              Field("id", _STR, "Unique identifier for this stack frame (one-based index converted to string).",
                    required=True, origin=PROFILE),
              Field("file_location_id", pa.int32(), "Reference to the file location ID in StackFrameFileLocation "
                    "table.", required=True, origin=PROFILE),
              Field("parent_frame_id", _STR, "Reference to the parent stack frame ID, or 0 if this is the root "
                    "frame.", required=True, origin=PROFILE),
          )),
    Table("StackFrameFileLocation", "File location information combining file names, function names, and line "
          "numbers for debugging and tracing execution back to source code.", (
              Field("id", _STR, "Unique identifier for this file location (one-based index converted to string).",
                    required=True, origin=PROFILE),
              Field("file_name_id", pa.int32(), "Reference to the file name ID in StackFrameFileName table.",
                    required=True, origin=PROFILE),
              Field("function_name_id", pa.int32(), "Reference to the function name ID in StackFrameFunctionName "
                    "table.", required=True, origin=PROFILE),
              Field("line_number", pa.int32(), "Line number within the source file.", required=True, origin=PROFILE),
          )),
    Table("StackFrameFileName", "Source code file names referenced in the stack frames for debugging and tracing "
          "execution back to source code.", (
              Field("id", _STR, "Unique identifier for this file name (one-based index converted to string).",
                    required=True, origin=PROFILE),
              Field("name", _STR, "Source code file name or path.", required=True, origin=PROFILE,
                    example="model.py"),
          )),
    Table("StackFrameFunctionName", "Function names referenced in the stack frames for debugging and tracing "
          "execution back to source code.", (
              Field("id", _STR, "Unique identifier for this function name (one-based index converted to string).",
                    required=True, origin=PROFILE),
              Field("name", _STR, "Function or method name.", required=True, origin=PROFILE),
          )),
    Table("FrameworkNode", "Framework hierarchy node information: the nn.Module calls operators ran in (a node per "
          "module path).", (
              Field("node_name", _STR, "Name of the current node in the hierarchy (here its whole module path, "
                    "which is unique).", required=True, origin=PROFILE, example="GPT_0/Block_1"),
              Field("children_names", _STR, "Comma separated array of child node names.", required=True,
                    origin=PROFILE, example="[child1, child2]"),
              Field("parent_name", _STR, "Name of the parent node in the hierarchy.", required=True, origin=PROFILE),
              Field("children_ids", _STR, "Comma separated array of framework operator IDs associated with this "
                    "node.", required=True, origin=PROFILE, example="[123, 456, 789]"),
              Field("start_ts", _I64, "Earliest start time among all operations in this node.", NS, True, MEASURED),
              Field("end_ts", _I64, "Latest end time among all operations in this node.", NS, True, MEASURED),
              Field("time_intervals", _STR, "A list of timestamp intervals after merging all corresponding "
                    "operation timestamps. Each interval is represented as [start, end].", required=True,
                    origin=MEASURED, example="[[1000, 2000], [3000, 4000]]"),
          )),
    Table("EstimatedActivity", "The estimated chip timeline: each device kernel re-timed by the cost model for a "
          "chip generation, on the engines that do its work (kernels back to back per core).", tuple(
              Field(name, kind, description, unit, origin=origin, extension=True)
              for name, kind, description, unit, origin in (
                  ("generation", _STR, "The chip generation of this timeline (trn1, trn2, trn3).", "", PROFILE),
                  ("core", _I64, "The simulated logical NeuronCore.", "", PROFILE),
                  ("engine", _STR, "TensorE, VectorE, ScalarE, GpSimd, DMA, Collective or Host.", "", PROFILE),
                  ("name", _STR, "Instruction opcode, fused kernel or operator.", "", PROFILE),
                  ("start_ts", _I64, "Estimated start.", NS, ESTIMATED),
                  ("end_ts", _I64, "Estimated end.", NS, ESTIMATED),
                  ("duration_ns", _I64, "Estimated duration.", NS, ESTIMATED),
                  ("event_id", _I64, "The device kernel's SystemProfileEvents id.", "", PROFILE),
                  ("kernel_name", _STR, "The device kernel.", "", PROFILE),
                  ("op_name", _STR, "The framework operator that launched it.", "", PROFILE),
                  ("source_location", _STR, "Kernel-language source line of an instruction.", "", PROFILE),
                  ("waited_for", _STR, "What an instruction waited for: the engine, opcode and line of the "
                   "instruction that wrote what it reads (null: its engine was the bound).", "", ESTIMATED),
                  ("wait_ns", _I64, "How long it waited for that instruction.", NS, ESTIMATED)))),
    Table("Metadata", "Metadata associated with this profile, including the simulated system's configuration.", (
        Field("profile_schema_version", _STR, "The version of the data schema (MAJOR.MINOR.PATCH) these tables "
              "follow; SchemaFields lists its tables and fields.", required=True, origin=PROFILE, example="7.4.0"),
        Field("num_physical_cores", pa.int32(), "The number of physical NeuronCores in the Logical NeuronCore.",
              required=True, origin=PROFILE),
        Field("vnc_enabled", _BOOL, "Whether execution was on Logical NeuronCores of several physical cores.",
              required=True, origin=PROFILE),
        Field("first_hw_timestamp", _I64, "First timestamp in the trace.", NS, True, MEASURED),
        Field("last_hw_timestamp", _I64, "Last timestamp in the trace.", NS, True, MEASURED),
        Field("tensor_engine_clock_freq", _F64, "The clock frequency of the Tensor Engine.", "gigahertz", True,
              PROFILE),
        Field("vector_engine_clock_freq", _F64, "The clock frequency of the Vector Engine.", "gigahertz", True,
              PROFILE),
        Field("scalar_engine_clock_freq", _F64, "The clock frequency of the Scalar Engine.", "gigahertz", True,
              PROFILE),
        Field("gpsimd_engine_clock_freq", _F64, "The clock frequency of the GpSimd Engine.", "gigahertz", True,
              PROFILE),
        Field("instance_type", _STR, "The instance type the profile stands for.", origin=PROFILE,
              example="trn2.48xlarge"),
        Field("explorer_version", _STR, "The torch_neuronx version which wrote this profile.", origin=PROFILE),
        Field("profile_name", _STR, "User chosen name for this profile.", origin=PROFILE),
        Field("is_simulation", _BOOL, "Whether this profile is a simulation (always true here).", origin=PROFILE,
              example="true"),
        *(Field(name, kind, description, origin=PROFILE, extension=True) for name, kind, description in (
            ("chip_generation", _STR, "The simulated chip generation."),
            ("target_generation", _STR, "The chip generation the estimates are for."),
            ("engine_clock_hz", _F64, "The clock instruction cycles are counted at (Hz)."),
            ("cores", _I64, "Visible simulated logical NeuronCores."),
            ("cores_per_chip", _I64, "Logical NeuronCores per chip."),
            ("logical_nc_config", _I64, "Physical cores per logical core (NEURON_LOGICAL_NC_CONFIG)."),
            ("profiled_cores", _STR, "The cores the profile captured (capture_enabled_for_nc)."),
            ("rank", _I64, "The process's rank in torch.distributed's default group (null outside one)."),
            ("world_size", _I64, "The default group's size (null outside one)."),
            ("chip_timeline_unestimated", _STR, "Per generation, the kernels EstimatedActivity could not re-time "
             "(JSON)."),
            ("tensor_flops_bf16_per_core", _F64, "TensorE BF16 FLOP/s of one logical core of the target."),
            ("vector_flops_per_core", _F64, "VectorE FP32 FLOP/s of one logical core of the target."),
            ("vector_elements_per_s_per_core", _F64, "VectorE elements per second of one logical core."),
            ("hbm_bytes_per_s_per_core", _F64, "One logical core's share of the chip's HBM bandwidth (B/s)."),
            ("host_link_bytes_per_s", _F64, "The assumed host link bandwidth (B/s)."),
            ("modes", _STR, "The profile modes recorded."),
            ("host", _STR, "The host the profile was recorded on."),
            ("torch_version", _STR, "The torch version."),
            ("created_unix_s", _F64, "When the profile was written (Unix seconds)."),
            ("note", _STR, "How to read the profile's times."),
        )),
    )),
)}

# What a core's idle gap waited for (torch_neuronx/profiling/gaps.py).
IDLE_CAUSES = ("host sync", "cpu fallback", "host launch", "collective", "queue")


def idle_field(cause: str) -> str:
    """Summary's field of the idle time waiting for ``cause`` (``idle_host_sync_ns``)."""
    return f"idle_{cause.replace(' ', '_')}_ns"

# Summary's per-engine fields: Explorer's prefix of each engine (DMA has no instruction count).
SUMMARY_ENGINES = {"TensorE": "tensor_engine", "VectorE": "vector_engine", "ScalarE": "scalar_engine",
                   "GpSimd": "gpsimd_engine", "DMA": "dma"}


def _engine_fields(engine: str, prefix: str) -> tuple[Field, ...]:
    what = "at least one DMA transfer is running" if engine == "DMA" else f"{engine} is processing an instruction"
    fields = (Field(f"{prefix}_active_time", _F64, f"ESTIMATED duration of time when {what} (framework operators "
                    "costed whole, kernel-language instructions by the simulator).", "seconds"),
              Field(f"{prefix}_active_time_percent", _F64, f"Percentage of total_time when {what}.", "percent"))
    if engine != "DMA":
        fields += (Field(f"{prefix}_instruction_count", _I64, f"Number of {engine} instructions issued by "
                         "kernel-language kernels.", origin=MEASURED),)
    return fields


TABLES["Summary"] = Table("Summary", "Profile performance metrics which summarize execution: ESTIMATED chip time "
                          "and utilisations for the target, and the simulator's measured times.", (
    Field("total_time", _F64, "ESTIMATED on-device execution time on the target chip, summed over the profiled "
          "cores.", "seconds"),
    Field("model_flops", _I64, "FLOPs of useful Tensor Engine compute: the model's matrix multiplications.", "flops"),
    Field("hardware_flops", _I64, "FLOPs of every Tensor Engine instruction (model FLOPs plus transposes).", "flops"),
    Field("transpose_flops", _I64, "Tensor Engine FLOPs spent on transposes (kernel-language kernels).", "flops"),
    Field("mfu_estimated_percent", _F64, "Model FLOPs Utilization: the model FLOPs at the Tensor Engine's peak for "
          "their dtype over total_time.", "percent"),
    Field("hfu_estimated_percent", _F64, "Hardware FLOPs Utilization: the same with the hardware FLOPs.", "percent"),
    Field("mbu_estimated_percent", _F64, "Memory Bandwidth Utilization: bytes moved over total_time times the "
          "core's HBM bandwidth.", "percent"),
    *(f for engine, prefix in SUMMARY_ENGINES.items() for f in _engine_fields(engine, prefix)),
    *(Field(name, kind, description, origin=origin, extension=True) for name, kind, description, origin in (
        ("steps", _I64, "ProfilerStep# spans recorded (at least 1).", PROFILE),
        ("wall_time_us", _F64, "First to last recorded event, in microseconds.", MEASURED),
        ("device_time_us", _F64, "Time the simulated cores ran kernels, in microseconds.", MEASURED),
        ("host_fallback_time_us", _F64, "Host time of CPU fallbacks, in microseconds.", MEASURED),
        ("estimated_step_time_us", _F64, "total_time per step, in microseconds.", ESTIMATED),
        ("kernels", _I64, "Device kernels recorded.", MEASURED),
        ("fallback_ops", _I64, "Operators that fell back to the CPU.", MEASURED),
        ("unestimated_ops", _I64, "Operators the cost model could not estimate.", ESTIMATED),
        *((idle_field(cause), _I64, f"Idle time of the cores waiting for: {cause} (Flow's "
           "waited_for), in nanoseconds.", MEASURED) for cause in IDLE_CAUSES),
    )),
))

SCHEMA_FIELDS = Table("SchemaFields", "The schema of the data in this profile: every field of every table, "
                      "with its type, description and unit.", (
                          Field("table_name", _STR, "The table this field belongs to.", required=True, origin=PROFILE),
                          Field("table_description", _STR, "The description of the table.", required=True,
                                origin=PROFILE),
                          Field("field_name", _STR, "The name of this field.", required=True, origin=PROFILE),
                          Field("field_description", _STR, "The description of this field.", required=True,
                                origin=PROFILE),
                          Field("field_example", _STR, "An example of a value of this field.", origin=PROFILE),
                          Field("field_type", _STR, "The data type of this field.", required=True, origin=PROFILE),
                          Field("field_required", _BOOL, "Whether this field always holds a value.", required=True,
                                origin=PROFILE),
                          Field("field_format", _STR, "The format of the type (int64, double).", origin=PROFILE),
                          Field("field_unit", _STR, "The unit of this field.", origin=PROFILE),
                          Field("field_origin", _STR, "measured (on the simulator), estimated (cost model) or "
                                "profile (describes the profile).", required=True, origin=PROFILE, extension=True),
                          Field("field_extension", _BOOL, "Whether the field is ours, not in Explorer's schema.",
                                required=True, origin=PROFILE, extension=True),
                      ))


def schema_fields() -> pa.Table:
    """The SchemaFields table of the tables above (itself included)."""
    rows = []
    for table in (*TABLES.values(), SCHEMA_FIELDS):
        for f in table.fields:
            kind, fmt = _TYPES[f.type]
            rows.append({"table_name": table.name, "table_description": table.description, "field_name": f.name,
                         "field_description": f.description, "field_example": f.example or None,
                         "field_type": kind, "field_required": f.required, "field_format": fmt or None,
                         "field_unit": f.unit or None, "field_origin": f.origin, "field_extension": f.extension})
    return pa.Table.from_pylist(rows, SCHEMA_FIELDS.schema)
