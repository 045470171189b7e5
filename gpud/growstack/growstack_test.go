package growstack

import "testing"

// deep recurses n frames of about 1 KiB each.
//
//go:noinline
func deep(n int) byte {
	var b [1 << 10]byte
	if n == 0 {
		return b[0]
	}
	return deep(n-1) + b[n%len(b)]
}

// BenchmarkGoroutineDeepStart is a new goroutine whose path needs ~12 KiB
// of stack, with Grow first and without: the stack grown once against
// several times.
func BenchmarkGoroutineDeepStart(b *testing.B) {
	for _, grow := range []bool{false, true} {
		name := "doubling"
		if grow {
			name = "grow"
		}
		b.Run(name, func(b *testing.B) {
			done := make(chan byte)
			for b.Loop() {
				go func() {
					if grow {
						Grow()
					}
					done <- deep(10)
				}()
				<-done
			}
		})
	}
}
