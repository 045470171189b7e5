package gpu

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// unusedCharMajor returns a character-device major that the kernel has not
// registered, according to the /proc/devices file at path. It searches the
// kernel's dynamic ranges (511..384, then 254..234) from the top, where a
// real driver would get its number last.
func unusedCharMajor(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read registered device majors: %w", err)
	}
	defer f.Close()
	used, err := parseCharMajors(f)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return pickUnusedMajor(used)
}

func pickUnusedMajor(used map[uint32]bool) (uint32, error) {
	for _, r := range [][2]uint32{{511, 384}, {254, 234}} {
		for m := r[0]; m >= r[1]; m-- {
			if !used[m] {
				return m, nil
			}
		}
	}
	return 0, fmt.Errorf("no free character device major in the dynamic ranges")
}

// parseCharMajors reads the "Character devices:" section of /proc/devices.
func parseCharMajors(r io.Reader) (map[uint32]bool, error) {
	used := map[uint32]bool{}
	sc := bufio.NewScanner(r)
	inChar := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
			continue
		case line == "" || strings.HasSuffix(line, "devices:"):
			inChar = false
			continue
		case !inChar:
			continue
		}
		num, _, _ := strings.Cut(line, " ")
		m, err := strconv.ParseUint(num, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		used[uint32(m)] = true
	}
	return used, sc.Err()
}
