package api

// Interactive steps (srun --pty) and srun reattaching to a step after its
// node agent restarted. Both extend the step protocol of step.go without
// changing what an older srun or agent in this tree sends:
//
//   - StepRequest.Pty asks for task 0 on a terminal of Rows x Cols. Its
//     output (the terminal's, stdout and stderr merged as on any tty)
//     comes as StepStdout frames; srun's keys go as StepStdin, ^C among
//     them as a byte, and a window size change as StepResize.
//   - StepRequest.Attach with Step follows step Step again from the
//     start of what the agent still holds: StepStarted, then the output
//     buffered while nobody listened, the exits, StepDone.
//
// Both work over any connection speaking the step protocol (the job's
// unix socket, or a network one), as nothing in them names the transport.

// StepResize is srun to agent: the terminal is now Rows x Cols.
const StepResize = "resize"
