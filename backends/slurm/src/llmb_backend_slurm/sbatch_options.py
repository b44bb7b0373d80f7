"""sbatch's long options (Slurm 22.05), as data, and how sbatch resolves a name.

sbatch reads its options, on the command line and in ``#SBATCH`` lines, with
getopt_long: a name that is exactly an option is that option; otherwise any
prefix of exactly one option is that option (``--outpu`` is ``--output``);
a prefix of several is ambiguous. ``resolve`` answers with the options a
name can stand for; ``canonical`` names the option an alias sets.

``LISTED``: every ``--name`` in ``sbatch --help`` and ``sbatch --usage`` of
Slurm 22.05 (tests/test_slurm_options.py compares them with the installed
sbatch). ``UNLISTED``: options sbatch 22.05 accepts that neither prints
(most are in ``man sbatch``). ``ALIASES``: unlisted names that set a listed option.
``FLAGS``: the options that take no value. ``NEWER``: options of later sbatch
versions that llmb itself writes (``--segment``, where the cluster's sbatch has it).
``FORMER``: names older sbatch versions had, and the option that replaced each.

An ``ADDITIONAL_SLURM_PARAMS`` item must give one of these names whole
(``whole``): sbatch would read an abbreviation as whichever option it
abbreviates today (or refuse it as ambiguous), which is no name to write
into a script that a later sbatch reads.
"""

from __future__ import annotations

LISTED = frozenset(
    """
account array bb bbf begin chdir cluster-constraint clusters comment constraint container contiguous core-spec
cores-per-socket cpu-freq cpus-per-gpu cpus-per-task deadline delay-boot dependency distribution error exclude
exclusive export export-file extra-node-info get-user-env gid gpu-bind gpu-freq gpus gpus-per-node gpus-per-socket
gpus-per-task gres gres-flags help hold ignore-pbs input job-name licenses mail-type mail-user mcs-label mem mem-bind
mem-per-cpu mem-per-gpu mincpus network nice no-kill no-requeue nodefile nodelist nodes ntasks ntasks-per-core
ntasks-per-node ntasks-per-socket output overcommit oversubscribe parsable partition power priority profile propagate
qos quiet reboot requeue reservation signal sockets-per-node spread-job switches thread-spec threads-per-core time
time-min tmp uid usage use-min-nodes verbose version wait wckey wrap
""".split()
)

UNLISTED = frozenset(
    """
acctg-freq batch cluster context hint kill-on-invalid-dep ntasks-per-gpu ntasks-per-tres open-mode prefer
tasks-per-node test-only wait-all-nodes
""".split()
)

ALIASES = {"tasks-per-node": "ntasks-per-node", "cluster": "clusters"}

# The options sbatch 22.05 takes with no value (or an optional one, as --name=value): the only ones an
# ADDITIONAL_SLURM_PARAMS item may give as a bare word (tests/test_slurm_options.py asks the installed
# sbatch which options these are).
FLAGS = frozenset(
    """
contiguous exclusive get-user-env help hold ignore-pbs nice no-kill no-requeue overcommit oversubscribe parsable
propagate quiet reboot requeue spread-job test-only usage use-min-nodes verbose version wait
""".split()
)

OPTIONS = LISTED | UNLISTED

NEWER = frozenset({"segment"})  # Slurm 24.11's topology/block scheduling

FORMER = {"share": "oversubscribe"}  # older sbatch: -s, --share; 22.05: -s, --oversubscribe


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def resolve(name: str) -> list[str]:
    """The options (sorted) sbatch may take ``--name`` for: one when it resolves, several when
    it is ambiguous, none when sbatch 22.05 has no such option."""
    if name in OPTIONS:
        return [name]
    return sorted(option for option in OPTIONS if option.startswith(name))


def whole(name: str) -> bool:
    """Whether ``name`` is the whole name of an sbatch option (or an alias of one), not an
    abbreviation and not a word sbatch does not know."""
    return name in OPTIONS or name in NEWER
