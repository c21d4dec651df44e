"""cactus-bench's SLURM launcher for Hydra (`hydra/launcher=slurm`). Hydra takes launcher classes from the
`hydra_plugins` namespace only, so the class lives here; what it does is in cactus_bench/app/cluster.py."""

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher


class SlurmLauncher(SubmititSlurmLauncher):
    """Hydra's submitit SLURM launcher: one job array, quiet without accounting, every job waited for and
    those that did not finish named together."""

    def launch(self, job_overrides, initial_job_idx):
        from cactus_bench.app.cluster import launch_array

        return launch_array(self, job_overrides, initial_job_idx)
