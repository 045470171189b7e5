package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// Version is the only configuration version this gpud reads.
const Version = 1

// problems collects validation errors so Validate can report all of them.
type problems struct{ errs []error }

func (p *problems) addf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf(format, args...))
}

func (p *problems) err() error { return errors.Join(p.errs...) }

// arrayTables are the [[name]] tables, so messages show them as written.
var arrayTables = map[string]bool{"partition": true, "qos": true, "account": true}

// load decodes the TOML file at path over dst, which holds the defaults.
// An empty path leaves dst as is.
func load(path string, dst any) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read config %s: file does not exist; give an existing file, or no --config for the defaults", path)
		}
		return fmt.Errorf("read config %s: %w", path, err)
	}
	if err := decode(data, dst); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

func decode(data []byte, dst any) error {
	// Check the version alone first: a file written for another version
	// would otherwise show up as a list of unknown keys.
	var head struct {
		Version *int `toml:"version"`
	}
	if err := toml.Unmarshal(data, &head); err != nil {
		return describeDecodeError(err, data, reflect.TypeOf(dst).Elem())
	}
	switch {
	case head.Version == nil:
		return fmt.Errorf("version: missing; add \"version = %d\" as the first line", Version)
	case *head.Version != Version:
		return fmt.Errorf("version: %d is not supported; this gpud reads version %d", *head.Version, Version)
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return describeDecodeError(err, data, reflect.TypeOf(dst).Elem())
	}
	return nil
}

// describeDecodeError rewrites go-toml's errors to name the key as the
// user wrote it, its line, and what is allowed.
func describeDecodeError(err error, data []byte, root reflect.Type) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		var p problems
		for i := range strict.Errors {
			e := &strict.Errors[i]
			key := []string(e.Key())
			row, _ := e.Position()
			table, name := key[:len(key)-1], key[len(key)-1]
			allowed := allowedKeys(root, table)
			what := "key"
			if isTableHeader(data, row) {
				what = "table"
			}
			if allowed == nil {
				p.addf("line %d: unknown %s %s", row, what, strings.Join(key, "."))
				continue
			}
			p.addf("line %d: unknown %s %q %s (allowed: %s)", row, what, name, inTable(table), strings.Join(allowed, ", "))
		}
		return p.err()
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		key := []string(de.Key())
		if m := typeErrRE.FindStringSubmatch(de.Error()); m != nil && len(key) > 0 {
			return fmt.Errorf("line %d: %s: got a TOML %s, want %s", row, keyName(key), m[1], friendlyType(m[2]))
		}
		return fmt.Errorf("line %d: %s", row, strings.TrimPrefix(de.Error(), "toml: "))
	}
	return err
}

// isTableHeader reports whether line row (1-based) of data is a [table]
// or [[table]] header, so an unknown table is not called a key.
func isTableHeader(data []byte, row int) bool {
	lines := strings.Split(string(data), "\n")
	return row >= 1 && row <= len(lines) && strings.HasPrefix(strings.TrimSpace(lines[row-1]), "[")
}

var typeErrRE = regexp.MustCompile(`cannot decode TOML (\w+) into .* of type (\S+)`)

func friendlyType(goType string) string {
	switch {
	case strings.HasSuffix(goType, "Duration"):
		return `a duration string such as "30s"`
	case strings.HasPrefix(goType, "[]"):
		return "a list such as [\"a\", \"b\"]"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a quoted string"
	}
	return "a " + goType
}

// tableName shows a table path as written: [scheduler.priority],
// [[partition]], or "the top level".
func tableName(path []string) string {
	if len(path) == 0 {
		return "the top level"
	}
	if len(path) == 1 && arrayTables[path[0]] {
		return "[[" + path[0] + "]]"
	}
	return "[" + strings.Join(path, ".") + "]"
}

// keyName shows a full key the way Validate's messages do:
// "[scheduler] interval", or "version" at the top level.
func keyName(key []string) string {
	if len(key) == 1 {
		return key[0]
	}
	return tableName(key[:len(key)-1]) + " " + key[len(key)-1]
}

// allowedKeys lists the TOML keys of the table at path in the struct type
// root, or nil when path is not a table.
func allowedKeys(root reflect.Type, path []string) []string {
	t := root
	for _, name := range path {
		f, ok := fieldByTag(t, name)
		if !ok {
			return nil
		}
		t = f.Type
		if t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
	}
	var keys []string
	for i := range t.NumField() {
		if tag := tomlTag(t.Field(i)); tag != "" {
			keys = append(keys, tag)
		}
	}
	sort.Strings(keys)
	return keys
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if tomlTag(t.Field(i)) == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

func tomlTag(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if tag == "-" {
		return ""
	}
	return tag
}

func inTable(path []string) string {
	if len(path) == 0 {
		return "at the top level"
	}
	return "in " + tableName(path)
}
