package quick

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// stdinFrom makes text this process's standard input (descriptor 0), in
// an anonymous memory file, so that the program exec'd next reads the
// script this one already read from the pipe or terminal.
func stdinFrom(text []byte) error {
	fd, err := unix.MemfdCreate("sbatch-script", 0)
	if err != nil {
		return fmt.Errorf("keep the script read from standard input for gpusubmit: %w", err)
	}
	defer unix.Close(fd)
	for b := text; len(b) > 0; {
		n, err := unix.Write(fd, b)
		if err != nil {
			return fmt.Errorf("keep the script read from standard input for gpusubmit: %w", err)
		}
		b = b[n:]
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return fmt.Errorf("keep the script read from standard input for gpusubmit: %w", err)
	}
	if err := unix.Dup2(fd, 0); err != nil {
		return fmt.Errorf("keep the script read from standard input for gpusubmit: %w", err)
	}
	return nil
}
