"""How fast the command line answers: `aref --help` and `aref CMD --help` (issue 12 asks for < 0.5 s), and
which heavy packages each imports (none should). Wall time on a shared, loaded machine mostly measures the
wait for a CPU; the CPU time is the command's own cost.

    PYTHONPATH=. python bench/cli_startup.py
"""
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [["--help"], ["compare", "--help"], ["run", "--help"], ["solve", "--help"], ["compile", "--help"]]
PROBE = ("import sys\nfrom aref.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         "print('HEAVY=' + ','.join(m for m in ('torch', 'cutlass', 'ortools', 'matplotlib') if m in sys.modules))")


def main():
    env = {**os.environ, "PYTHONPATH": ROOT}
    for argv in CASES:
        times, cpu = [], []
        for _ in range(5):
            t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-m", "aref", *argv], capture_output=True, cwd=ROOT, env=env, check=True)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            times.append(time.perf_counter() - t0)
            cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        heavy = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=ROOT,
                               env=env).stdout.split("HEAVY=")[-1].strip()
        print(f"aref {' '.join(argv):18s} wall median {statistics.median(times):.3f} s, min {min(times):.3f} s; "
              f"CPU median {statistics.median(cpu):.3f} s; heavy imports: {heavy or 'none'}")


if __name__ == "__main__":
    main()
