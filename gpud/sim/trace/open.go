package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpud/gpud/gpud/sim"
)

// Format names a trace format.
type Format string

// Formats Open knows.
const (
	FormatAuto     Format = "auto"
	FormatSWF      Format = "swf"
	FormatPhilly   Format = "philly"
	FormatPhillyVC Format = "philly-vc"
	FormatITP      Format = "itp"
	FormatTiresias Format = "tiresias"
	FormatOpenB    Format = "openb"
)

// Formats lists the accepted --format values.
var Formats = []Format{FormatAuto, FormatSWF, FormatPhilly, FormatPhillyVC, FormatITP, FormatTiresias, FormatOpenB}

// Reader yields one job per call; io.EOF ends the trace.
type Reader interface {
	Next() (sim.Job, error)
}

// File is an open trace: a Reader plus the file it reads.
type File struct {
	Reader
	Format Format
	// Skipped counts records the reader dropped (unknown runtime or size).
	Skipped *int
	closers []io.Closer
}

// Close closes the underlying file.
func (f *File) Close() error {
	var errs []error
	for i := len(f.closers) - 1; i >= 0; i-- {
		errs = append(errs, f.closers[i].Close())
	}
	return errors.Join(errs...)
}

// Open opens path (gzip or plain) and returns a reader for format, which
// may be FormatAuto.
func Open(path string, format Format) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	tf, err := NewReader(f, path, format)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open trace %s: %w", path, err)
	}
	tf.closers = append([]io.Closer{f}, tf.closers...)
	return tf, nil
}

// NewReader reads a trace from r; name (a file name, may be "") helps
// auto-detection.
func NewReader(r io.Reader, name string, format Format) (*File, error) {
	tf := &File{}
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("read gzip header: %w", err)
		}
		tf.closers = append(tf.closers, zr)
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	if format == "" || format == FormatAuto {
		head, _ := br.Peek(4096)
		format = Detect(name, head)
		if format == "" {
			return nil, fmt.Errorf("cannot tell the trace format from its name or first line; give --format (one of %s)", formatList())
		}
	}
	skipped := 0
	tf.Skipped = &skipped
	tf.Format = format
	var err error
	switch format {
	case FormatSWF:
		tf.Reader = newSWF(br, &skipped)
	case FormatPhilly, FormatPhillyVC, FormatITP, FormatTiresias, FormatOpenB:
		tf.Reader, err = newCSV(br, format, &skipped)
	default:
		return nil, fmt.Errorf("unknown format %q (use one of %s)", format, formatList())
	}
	if err != nil {
		return nil, err
	}
	return tf, nil
}

func formatList() string {
	s := make([]string, len(Formats))
	for i, f := range Formats {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// Detect guesses the format from a file name and the first bytes of the
// (decompressed) content; "" when unsure.
func Detect(name string, head []byte) Format {
	first := head
	if i := bytes.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	line := strings.ToLower(strings.TrimSpace(string(first)))
	switch {
	case strings.HasPrefix(line, "#job id,arrival time"):
		return FormatPhilly
	case strings.HasPrefix(line, "name,cpu_milli"):
		return FormatOpenB
	case strings.HasPrefix(line, "job_id,submission_time,duration,num_gpu"):
		return FormatITP
	case strings.HasPrefix(line, "job_id,num_gpu,submit_time"):
		return FormatTiresias
	case strings.HasPrefix(line, "job_id,submit_time") && strings.Contains(line, "num_gpu"):
		return FormatPhillyVC
	case strings.HasPrefix(line, ";"):
		return FormatSWF
	}
	base := strings.TrimSuffix(strings.ToLower(name), ".gz")
	if strings.HasSuffix(base, ".swf") {
		return FormatSWF
	}
	// An SWF file without a header: 18 numeric fields.
	if f := strings.Fields(line); len(f) == 18 {
		return FormatSWF
	}
	return ""
}

// ReadAll reads up to n jobs (n ≤ 0: all) from f.
func ReadAll(f Reader, n int) ([]sim.Job, error) {
	var jobs []sim.Job
	for n <= 0 || len(jobs) < n {
		j, err := f.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return jobs, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}
