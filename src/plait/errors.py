"""The one exception type for user mistakes (STYLE.md rule 11)."""


class ConfigError(ValueError):
    """A user-supplied value breaks a rule; the message names the value and the rule.

    Example: ``ConfigError("tp=3 must divide num_heads=32")``.
    """
