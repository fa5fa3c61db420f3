"""pytest's settings for this suite: what it does not collect."""
# tests/tmp holds what the tests write, and tests/same_outputs.py's worktrees of other revisions
# (with their own tests); tests/build holds the builds.
collect_ignore = ["tmp", "build"]
