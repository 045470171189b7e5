# /etc/profile.d/gpud.sh: gpud's Slurm-named commands (srun, sbatch,
# squeue, ...) on a login shell's PATH. `make install` installs it here
# with @BINDIR@ filled in (PREFIX/bin).
#
# In a gpud job the node puts its tools first on PATH and names them in
# GPUD_TOOLS_DIR. A login shell (a `#!/bin/bash -l` batch script) resets
# PATH in /etc/profile, then reads this file: it puts them first again, so
# the job's srun is gpud's, not another Slurm's or none. Outside a job it
# adds the installed commands when the login PATH lacks them.
if [ -n "${GPUD_TOOLS_DIR:-}" ] && [ -d "$GPUD_TOOLS_DIR" ]; then
	case ":$PATH:" in
	":$GPUD_TOOLS_DIR:"*) ;;
	*) PATH="$GPUD_TOOLS_DIR:$PATH" ;;
	esac
elif [ -d "@BINDIR@" ]; then
	case ":$PATH:" in
	*":@BINDIR@:"*) ;;
	*) PATH="$PATH:@BINDIR@" ;;
	esac
fi
export PATH
