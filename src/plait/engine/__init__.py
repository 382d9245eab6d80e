"""How each training engine runs a plan: cited facts, and one capability table that the plan rules, the
planner and ``plait run`` all read (ARCHITECTURE.md, "Growing it")."""
