"""The errors aworld-train reports in one line. Each message names the field (or file) and the fix.

Bad input is refused before any model loads (exit code 2 from the CLI); a run that started and
failed (an engine that crashed, a run or an evaluation where every episode failed for one
cause) exits with 1, so a job queue never takes a failure for success.
"""


class AworldTrainError(ValueError):
    """Base class: bad input detected before any model is loaded."""

    exit_code = 2


class ConfigError(AworldTrainError):
    pass


class DatasetError(AworldTrainError):
    pass


class RewardError(AworldTrainError):
    pass


class AgentSpecError(AworldTrainError):
    pass


class ModelError(AworldTrainError):
    pass


class ToolServerError(AworldTrainError):
    """An MCP server the agent is configured with does not answer."""


class RunFailed(AworldTrainError):
    """A run that started did not finish its work: nothing it printed may pass for success."""

    exit_code = 1


class RunCannotLearn(RunFailed):
    """Every episode of several steps in a row failed for one cause: the run stopped."""


class ToolServerLost(RunCannotLearn):
    """An `env:` MCP server stopped during the run and did not start again: no later episode
    could reach its tools."""


class RunStoppedByDisk(RunFailed):
    """A write to the run folder failed for want of space (or quota): the run stopped there."""


class EngineFailed(RunFailed):
    """A launched engine (verl, AReaL) exited with an error."""


class EvaluationFailed(RunFailed):
    """Every episode of an evaluation failed for one cause: its scores measure nothing."""


def no_checkpoint_to_resume(folder) -> str:
    """The refusal of `run --resume` where there is nothing to resume, for every engine."""
    return (
        f"--resume: {folder} holds no checkpoint to continue from: run without --resume to start at "
        "step 0, or set trainer.run_dir to the folder of the run to continue"
    )
