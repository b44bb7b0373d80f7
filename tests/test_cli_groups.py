"""A command with subcommands (issue 43, item 6): alone it does its main job rather than exit 2 with its
usage, and its help names each subcommand's purpose whole at 80 columns."""

from __future__ import annotations

import pytest


def test_config_alone_shows_the_settings(cli, monkeypatch):
    alone = cli("config")
    assert alone.code == 0, alone.err
    assert alone.out == cli("config", "show").out and "KEY" in alone.out


@pytest.mark.parametrize("group", ["config", "certify", "plugins"])
def test_a_groups_help_gives_every_subcommands_sentence_whole(cli, monkeypatch, group):
    monkeypatch.setenv("COLUMNS", "80")
    shown = cli(group, "--help")
    assert shown.code == 0, shown.err
    commands = shown.out.split("Commands:\n", 1)[1]
    assert "..." not in commands, commands  # click's cut
    assert max(len(line) for line in shown.out.splitlines()) <= 80
