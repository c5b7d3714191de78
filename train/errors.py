"""Errors raised for bad input. Each message names the field and the fix."""


class AworldTrainError(ValueError):
    """Base class: bad input detected before any model is loaded."""


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


class RunCannotLearn(AworldTrainError):
    """Every episode of several steps in a row failed for one cause: the run stopped."""
