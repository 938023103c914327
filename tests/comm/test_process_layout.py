"""A job's process layout as one fact: the software preset states it
(:attr:`SoftwarePreset.processes`), the system costs price collectives on the topology stamped
with it (:func:`perfmodel.pipeline.inputs.system_costs`), and ``perfmodel comm`` takes it as
``--processes`` or reads it from an nccl-tests log's ``Pid`` column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.comm.model import CommCostModel
from perfmodel.comm.nccl_tests import read_nccl_tests
from perfmodel.comm.p2p_read import ProcessLayout, process_layout
from perfmodel.dtypes import Precision
from perfmodel.ops import CollectiveOp
from perfmodel.parallel.software import PRESETS, get_preset
from perfmodel.pipeline.inputs import system_costs
from perfmodel.topology import load_system

GIB = 2**30
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"

#: The stacks that drive a server's GPUs from one process (in-graph replication or threads).
SINGLE_PROCESS = {"tf-mirrored", "tf-replicated", "pytorch-dataparallel", "keras-multi-gpu"}


def test_single_process_stacks_are_the_in_graph_ones():
    layouts = {name: p.processes for name, p in PRESETS.items()}
    assert {n for n, v in layouts.items() if v is ProcessLayout.PER_SERVER} == SINGLE_PROCESS
    assert all(v is ProcessLayout.PER_GPU for n, v in layouts.items() if n not in SINGLE_PROCESS)


def test_system_costs_price_a_single_process_stack_with_direct_pointers():
    """DGX-1 V100 (NCCL 2.8 era): tf-replicated's 2-GPU ring all-reduce of 1 GiB skips the
    final ``directRecv`` copy that a one-process-per-GPU stack pays, ``2 (m / 2) / B_mem``."""
    topo = load_system("dgx1-v100")
    tf = system_costs(topo, Precision.FP32, None, get_preset("tf-replicated"))
    ddp = system_costs(topo, Precision.FP32, None, get_preset("pytorch-ddp"))
    assert process_layout(tf.topology) is ProcessLayout.PER_SERVER
    assert ddp.topology is topo  # one process per GPU: the topology as built
    gpus = topo.gpus[:2]
    t_tf = tf.comm.collective(CollectiveOp.ALLREDUCE, GIB, gpus, "ring").time_s
    t_ddp = ddp.comm.collective(CollectiveOp.ALLREDUCE, GIB, gpus, "ring").time_s
    mem_Bps = topo.gpu_spec().memory_bandwidth_Bps
    assert t_ddp - t_tf == pytest.approx(2 * (GIB / 2) / mem_Bps, rel=1e-9)


def test_the_stamped_topology_is_memoised():
    """``_system_costs`` caches on the topology's identity: the stamped copy is made once per
    (topology, layout), so a second call finds the same costs."""
    topo = load_system("dgx1-v100")
    preset = get_preset("tf-mirrored")
    a = system_costs(topo, Precision.FP32, None, preset)
    b = system_costs(topo, Precision.FP32, None, preset)
    assert a is b
    # another single-process preset with the same host cost shares the stamped topology
    c = system_costs(topo, Precision.FP32, None, get_preset("tf-replicated"))
    assert c.topology is a.topology


@pytest.mark.parametrize("system", ["dgx-h100", "dgx-a100"])
def test_modern_and_read_mode_systems_do_not_move(system):
    """H100 (NCCL 2.29 era: no direct pointers without registration) and A100 (read mode:
    never direct) price a single-process stack like a one-process-per-GPU one."""
    topo = load_system(system)
    tf = system_costs(topo, Precision.FP32, None, get_preset("tf-mirrored"))
    gpus = topo.gpus[:8]
    per_gpu = CommCostModel(topo).collective(CollectiveOp.ALLREDUCE, GIB, gpus, "ring")
    assert tf.comm.collective(CollectiveOp.ALLREDUCE, GIB, gpus, "ring").time_s == (
        pytest.approx(per_gpu.time_s, rel=1e-12)
    )


def test_log_pids_give_the_layout():
    one = read_nccl_tests(FIX / "old-layout-all_gather-with-nccl-info.txt")  # -g 4, one Pid
    assert one.processes is ProcessLayout.PER_SERVER
    many = read_nccl_tests(FIX / "a3mega-h100-2node-all_reduce.txt")  # a Pid per rank
    assert many.processes is ProcessLayout.PER_GPU
    assert read_nccl_tests(FIX / "json-all_reduce.json").processes is None


def _busbw(args, capsys):
    assert (
        main(["comm", "--system", "dgx1-v100", "--gpus", "2", "--sizes", "1G", "--json", *args])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    return doc["processes"], doc["results"][0]["busbw_Bps"]


def test_comm_processes_flag(capsys):
    """Default one process per GPU; ``--processes per-server`` (nccl-tests ``-g N``) drops the
    copy on V100 and is faster; a bad value is a one-line error, exit 2."""
    default, bw_default = _busbw([], capsys)
    per_gpu, bw_per_gpu = _busbw(["--processes", "per-gpu"], capsys)
    one, bw_one = _busbw(["--processes", "PER-SERVER"], capsys)
    assert (default, per_gpu, one) == ("per-gpu", "per-gpu", "per-server")
    assert bw_default == bw_per_gpu < bw_one
    assert main(["comm", "--system", "dgx1-v100", "--processes", "threads"]) == 2
    err = capsys.readouterr().err
    assert "--processes 'threads'" in err and "per-gpu or per-server" in err


def test_compare_reads_the_log_unless_told(capsys):
    log = str(FIX / "old-layout-all_gather-with-nccl-info.txt")
    main(["comm", "--compare", log, "--system", "dgx1-v100", "--json"])
    read = json.loads(capsys.readouterr().out)
    main(["comm", "--compare", log, "--system", "dgx1-v100", "--json", "--processes", "per-gpu"])
    told = json.loads(capsys.readouterr().out)
    assert read["processes"] == "per-server" and read["processes_from"] == "the log's Pid column"
    assert told["processes"] == "per-gpu" and told["processes_from"] == "--processes"
    big_read, big_told = read["rows"][-1], told["rows"][-1]
    assert big_read["predicted_time_s"] < big_told["predicted_time_s"]


def test_a_run_may_state_its_layout():
    """``--software-option processes=...`` overrides the preset's fact (MultiWorkerMirrored
    with a worker per GPU; Horovod never runs one process per server by default); a bad value
    names itself and where it came from."""
    from perfmodel.errors import ConfigError
    from perfmodel.parallel.software import with_software_options

    topo = load_system("dgx1-v100")
    tf = get_preset("tf-mirrored")
    per_gpu = with_software_options(tf, {"processes": "per-gpu"})
    assert per_gpu.processes is ProcessLayout.PER_GPU
    assert system_costs(topo, Precision.FP32, None, per_gpu).topology is topo
    with pytest.raises(ConfigError, match="unknown process layout 'threads'"):
        with_software_options(tf, {"processes": "threads"})
