package pmi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The PMI wire protocols, as MPICH's simple PMI client (PMI-1) and the
// PMI-2 clients (MPICH's, Slurm's libpmi2) speak them over PMI_FD. Both
// start with the same line:
//
//	cmd=init pmi_version=V pmi_subversion=S
//
// answered "cmd=response_to_init rc=0 pmi_version=V pmi_subversion=S".
// PMI-1 then goes on in lines of space-separated key=value pairs, the
// first naming the command (cmd=get kvsname=K key=X). PMI-2 goes on in
// commands of "cmd=NAME;key=value;...;", each preceded by its length in
// six characters (decimal, padded with spaces), with a literal ';' in a
// value written ";;".

// Limits of the protocol, as both ends hold them (PMI-1's get_maxes
// tells the client).
const (
	MaxKVSName = 256
	MaxKeyLen  = 64
	MaxValLen  = 1024
	// maxLine bounds one PMI-1 line and one PMI-2 command: a put of the
	// longest key and value with a full kvsname fits many times over.
	maxLine = 16 << 10
	// lenSize is the width of a PMI-2 command's length field.
	lenSize = 6
)

var errLineTooLong = errors.New("PMI command too long")

// readLine reads one PMI-1 line without its newline.
func readLine(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		chunk, err := br.ReadSlice('\n')
		b.Write(chunk)
		if b.Len() > maxLine {
			return "", errLineTooLong
		}
		switch {
		case err == nil:
			return strings.TrimRight(b.String(), "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			if b.Len() > 0 && errors.Is(err, io.EOF) {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
}

// parse1 reads a PMI-1 line: space-separated key=value pairs (a value
// holds no space; its first '=' ends the key).
func parse1(line string) map[string]string {
	kv := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		if _, dup := kv[k]; !dup {
			kv[k] = v
		}
	}
	return kv
}

// line1 formats a PMI-1 answer: pairs are key, value, key, value, ...
func line1(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pairs[i] + "=" + pairs[i+1])
	}
	b.WriteByte('\n')
	return b.String()
}

// readCmd2 reads one PMI-2 command's body (after its length field).
func readCmd2(br *bufio.Reader) (string, error) {
	var lb [lenSize]byte
	if _, err := io.ReadFull(br, lb[:]); err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(lb[:])))
	if err != nil || n < 0 {
		return "", fmt.Errorf("bad PMI-2 command length %q", lb[:])
	}
	if n > maxLine {
		return "", errLineTooLong
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// parse2 reads a PMI-2 command: "key=value;" pairs, ";;" a literal ';'.
func parse2(body string) (map[string]string, error) {
	kv := map[string]string{}
	for i := 0; i < len(body); {
		eq := strings.IndexByte(body[i:], '=')
		if eq < 0 {
			if strings.TrimSpace(body[i:]) == "" {
				break
			}
			return nil, fmt.Errorf("PMI-2 command %q: a key without a value", body)
		}
		key := body[i : i+eq]
		if len(key) > MaxKeyLen {
			return nil, fmt.Errorf("PMI-2 command: key %.20q... longer than %d", key, MaxKeyLen)
		}
		i += eq + 1
		var v strings.Builder
		for i < len(body) {
			c := body[i]
			if c == ';' {
				if i+1 < len(body) && body[i+1] == ';' {
					v.WriteByte(';')
					i += 2
					continue
				}
				i++
				break
			}
			v.WriteByte(c)
			i++
		}
		if _, dup := kv[key]; !dup {
			kv[key] = v.String()
		}
	}
	return kv, nil
}

// cmd2 formats a PMI-2 command with its length field: pairs are key,
// value, key, value, ...; ';' in a value is written ";;".
func cmd2(pairs ...string) []byte {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		b.WriteString(pairs[i] + "=" + strings.ReplaceAll(pairs[i+1], ";", ";;") + ";")
	}
	body := b.String()
	return []byte(fmt.Sprintf("%-*d%s", lenSize, len(body), body))
}

// boolText is PMI-2's spelling of a boolean.
func boolText(b bool) string {
	if b {
		return "TRUE"
	}
	return "FALSE"
}
