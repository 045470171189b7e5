package step

import (
	"context"
	"fmt"

	"github.com/gpud/gpud/runtime"
)

// Interactive steps (srun --pty): task 0 of the step runs on a terminal
// in the allocation container (containerd exec with a pseudo-terminal),
// srun's keys reach it as bytes on its input (^C is the terminal's to
// turn into SIGINT for its foreground process group, as under Slurm's
// --pty), and srun's window size follows it (StepResize). As with
// Slurm's --pty, the step's other tasks run without a terminal and their
// output is dropped.

// execID names a step task's process within its allocation container.
func execID(step, task int) string { return fmt.Sprintf("step%d-task%d", step, task) }

// isPtyTask says whether a node's local task is the step's terminal task.
func isPtyTask(pty bool, nodeIndex, local int) bool { return pty && nodeIndex == 0 && local == 0 }

// ptyTask sets up a task's exec for srun --pty: task 0 on a terminal,
// the others without output.
func ptyTask(cfg *runtime.ExecConfig, st tasks, local int) {
	if !st.Pty {
		return
	}
	if !isPtyTask(st.Pty, st.NodeIndex, local) {
		cfg.Stdout, cfg.Stderr = nil, nil
		return
	}
	cfg.Terminal = true
	cfg.Rows, cfg.Cols = clampTTY(st.Rows), clampTTY(st.Cols)
	cfg.Stderr = nil // a terminal has one output
}

// clampTTY is a terminal dimension as the kernel keeps it (0: unset).
func clampTTY(n int) uint16 { return uint16(min(max(n, 0), 0xffff)) }

// resize sets the size of the step's terminal, when this part has it.
func (p *part) resize(rows, cols int) {
	if p.remoteResize != nil {
		if rows > 0 && cols > 0 {
			p.remoteResize(rows, cols)
		}
		return
	}
	p.mu.Lock()
	tty := p.tty
	p.mu.Unlock()
	if rz, ok := tty.(runtime.Resizer); ok && rows > 0 && cols > 0 {
		_ = rz.Resize(context.Background(), clampTTY(rows), clampTTY(cols))
	}
}
