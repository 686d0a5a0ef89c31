"""`tpubot eval`: incidents with expected answers, three arms, deterministic scores (issue 31)."""
