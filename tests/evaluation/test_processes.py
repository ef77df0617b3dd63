"""`gradkit evaluate` across 2 processes on localhost: torchrun (PyTorch, gloo) and jax.distributed (JAX, CPU
collectives through gloo) give the one-process result point for point; ranks that disagree are refused."""

import os
import socket
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from gradkit import cli, evaluation

BACKEND = keras.backend.backend()
ARGS = [
    "--eps",
    "0.1,0.15",
    "--steps",
    "4",
    "--n-queries",
    "20",
    "--batch-size",
    "16",
    "--seed",
    "3",
    "--no-progress",
]
DISAGREE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from gradkit import backend
    backend.start_processes()
    import keras
    from gradkit import evaluation
    rank, size = backend.processes()
    data = np.load(sys.argv[2])
    x = data["x_test"] + (0.01 if rank == 1 else 0.0)
    try:
        evaluation.evaluate_processes(keras.saving.load_model(sys.argv[1]), x, data["y_test"], epsilons=[0.1],
                                      attacks=["fgsm"], batch_size=16, clip_values=(0, 1.1))
    except ValueError as err:
        print(f"refused on rank {rank}: {err}")
    """
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("processes")
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (48, 6)).astype("float32")
    y = (x[:, 0] > 0.5).astype("int64") + 2 * (x[:, 1] > 0.5)
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(4, activation="softmax"),
        ]
    )
    model.compile(keras.optimizers.Adam(0.03), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=10, batch_size=16, verbose=0)
    model.save(folder / "model.keras")
    np.savez(folder / "test.npz", x_test=x, y_test=y)
    (folder / "disagree.py").write_text(DISAGREE)
    return folder


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _launch(files, command):
    """Runs `command` (after the interpreter) in 2 processes; returns their (returncode, output)."""
    if BACKEND == "torch":
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        proc = subprocess.run([*launcher, *command], capture_output=True, text=True, timeout=600, cwd=files)
        return [(proc.returncode, proc.stdout + proc.stderr)]
    env = {**os.environ, "JAX_COORDINATOR_ADDRESS": f"localhost:{_free_port()}", "JAX_NUM_PROCESSES": "2"}
    procs = [
        subprocess.Popen(
            [sys.executable, *command],
            env={**env, "JAX_PROCESS_ID": str(i)},
            cwd=files,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    return [(p.wait(timeout=600), p.stdout.read()) for p in procs]


needs_group = pytest.mark.skipif(
    BACKEND == "tensorflow", reason="process groups: torch.distributed, jax.distributed"
)


@pytest.fixture(scope="module")
def one_process(files):
    """The one-process samples.csv."""
    data = [str(files / "model.keras"), str(files / "test.npz")]
    assert cli.main(["evaluate", *data, *ARGS, "--out", str(files / "one")]) == 0
    return (files / "one" / "samples.csv").read_text()


@pytest.mark.slow
@needs_group
@pytest.mark.parametrize("mesh", [False, True], ids=["shards", "mesh"])
def test_two_processes_equal_one(files, one_process, mesh):
    if mesh and BACKEND != "jax":
        pytest.skip("a keras.distribution mesh over several processes: JAX only")
    data = [str(files / "model.keras"), str(files / "test.npz")]
    out = files / ("mesh" if mesh else "two")
    command = ["-m", "gradkit", "evaluate", *data, *ARGS, "--out", str(out), *(["--mesh"] if mesh else [])]
    results = _launch(files, command)
    assert all(code == 0 for code, _ in results), results
    assert (out / "samples.csv").read_text() == one_process


def test_mesh_needs_a_jax_process_group(files, capsys):
    data = [str(files / "model.keras"), str(files / "test.npz")]
    assert cli.main(["evaluate", *data, *ARGS, "--mesh", "--out", str(files / "no-mesh")]) == 2
    assert "`--mesh` needs the jax backend in a jax.distributed group" in capsys.readouterr().err
    assert not (files / "no-mesh").exists()


@pytest.mark.slow
@needs_group
def test_ranks_that_disagree_on_the_data_are_refused(files):
    results = _launch(
        files, [str(files / "disagree.py"), str(files / "model.keras"), str(files / "test.npz")]
    )
    output = "".join(out for _, out in results)
    for rank in (0, 1):
        assert f"refused on rank {rank}: The processes must evaluate the same" in output, output
    assert "rank 1 differs from rank 0 in x" in output


def test_ranks_that_disagree_are_refused_before_any_attack(files, monkeypatch):
    """A simulated 2-process group (fast, every backend): rank 1's `all_gather` answer differs from rank 0's
    in the model, in one setting, or in the labels; the refusal names each, before any attack runs."""
    from gradkit import backend
    from gradkit.evaluation import _shards

    model = keras.saving.load_model(files / "model.keras")
    data = np.load(files / "test.npz")
    x, y = data["x_test"], data["y_test"]
    monkeypatch.setattr(backend, "processes", lambda: (0, 2))
    monkeypatch.setattr(_shards, "evaluate_shard", lambda *a, **k: pytest.fail("an attack ran"))
    for key, message in (
        ("model", "rank 1 differs from rank 0 in model"),
        ("batch_size", "rank 1 differs from rank 0 in batch_size"),
        ("y", "rank 1 differs from rank 0 in y"),
    ):
        monkeypatch.setattr(backend, "all_gather", lambda obj, k=key: [obj, {**obj, k: "other"}])
        with pytest.raises(ValueError, match=f"{message} \\(this is rank 0\\)"):
            evaluation.evaluate_processes(model, x, y, epsilons=[0.1], attacks=["fgsm"], batch_size=16)


def test_more_processes_than_blocks_names_the_processes(files, monkeypatch):
    """A group larger than the number of blocks is refused naming `processes` (not an internal name)."""
    from gradkit import backend

    model = keras.saving.load_model(files / "model.keras")
    data = np.load(files / "test.npz")
    monkeypatch.setattr(backend, "processes", lambda: (0, 2))
    monkeypatch.setattr(backend, "all_gather", lambda obj: [obj, obj])
    with pytest.raises(ValueError, match="`processes` must be at most the number of blocks of 256 rows"):
        evaluation.evaluate_processes(model, data["x_test"][:40], data["y_test"][:40], epsilons=[0.1],
                                      attacks=["fgsm"], batch_size=256)  # fmt: skip


AFFINITY = textwrap.dedent(
    """
    import os
    from gradkit import backend
    backend.start_processes()
    rank, size = backend.processes()
    print(f"rank {rank} cores {sorted(os.sched_getaffinity(0))}")
    """
)


@pytest.mark.slow
@needs_group
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores or more"
)
@pytest.mark.parametrize("pin", ["1", "0"])
def test_processes_on_one_cpu_host_get_their_own_cores(files, monkeypatch, pin):
    """Each of 2 local CPU processes runs on its own half of the cores (JAX sizes its thread pool from
    the affinity); GRADKIT_CPU_AFFINITY=0 leaves every process every core."""
    monkeypatch.setenv("GRADKIT_CPU_AFFINITY", pin)
    (files / "affinity.py").write_text(AFFINITY)
    output = "".join(out for _, out in _launch(files, [str(files / "affinity.py")]))
    cores = sorted(os.sched_getaffinity(0))
    halves = [c.tolist() for c in np.array_split(np.array(cores), 2)]
    for rank in (0, 1):
        assert f"rank {rank} cores {halves[rank] if pin == '1' else cores}" in output, output
