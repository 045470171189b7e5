package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/controller"
)

// powerRunner runs [power]'s resume and suspend programs as Slurm runs
// ResumeProgram and SuspendProgram: the program with its configured
// arguments and then the nodes as one hostlist expression (node[3-6]),
// as program_user when one is set, from /, with GPUD_POWER_ACTION and
// GPUD_POWER_NODES in its environment; every line it writes goes to the
// controller's log. ctx ends it (the controller stopping): a program
// that must outlive the controller (a booting VM) forks and exits.
func powerRunner(log *slog.Logger) func(ctx context.Context, r controller.PowerRun) error {
	return func(ctx context.Context, r controller.PowerRun) error {
		if len(r.Program) == 0 {
			return nil
		}
		args := append(append([]string{}, r.Program[1:]...), r.Nodes)
		cmd := exec.CommandContext(ctx, r.Program[0], args...)
		cmd.Env = append(os.Environ(), "GPUD_POWER_ACTION="+r.Action, "GPUD_POWER_NODES="+r.Nodes)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		if r.User != "" {
			cred, err := credentialOf(r.User)
			if err != nil {
				return fmt.Errorf("%s program %s for %s: %w", r.Action, r.Program[0], r.Nodes, err)
			}
			cmd.SysProcAttr.Credential = cred
		}
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		// A program that leaves a child holding its output (an agent it
		// started in the background) must not hang us.
		cmd.WaitDelay = 5 * time.Second
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 4096), 64<<10)
			lines := 0
			for sc.Scan() {
				if lines++; lines > 1000 {
					continue // logged enough; keep draining
				}
				log.Info("power program output", "action", r.Action, "nodes", r.Nodes, "line", sc.Text())
			}
			_, _ = io.Copy(io.Discard, pr)
		}()
		err := cmd.Run()
		pw.Close()
		<-done
		if err != nil {
			return fmt.Errorf("%s program %s %s: %w", r.Action, r.Program[0], r.Nodes, err)
		}
		return nil
	}
}

// credentialOf is user name's uid, gid and groups, for running a program
// as it.
func credentialOf(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("program_user %q: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("program_user %q has a non-numeric uid or gid", name)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if v, err := strconv.ParseUint(g, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(v))
			}
		}
	}
	if os.Geteuid() != 0 && uint32(os.Geteuid()) != cred.Uid {
		return nil, fmt.Errorf("program_user %q: the controller runs as uid %d and cannot switch user; run it as root or leave program_user empty", name, os.Geteuid())
	}
	if os.Geteuid() != 0 {
		return nil, nil
	}
	return cred, nil
}
