package slurmrest

// field is one member of an object Slurm's API returns: its name, the
// versions that have it, and how gpud's record x is written as its value.
// The tables of fields are the whole difference between versions: a
// member added in v0.0.44 has since 44, one dropped after v0.0.44 has
// until 44, and one whose shape changed is two rows.
type field[T any] struct {
	name string
	span
	put func(w *jw, x *T)
}

// table is a list of fields with its per-version selection made once.
type table[T any] struct {
	all []field[T]
	by  map[int][]field[T]
}

func newTable[T any](fs []field[T]) *table[T] {
	t := &table[T]{all: fs, by: map[int][]field[T]{}}
	for _, v := range Versions {
		for _, f := range fs {
			if f.has(v) {
				t.by[v] = append(t.by[v], f)
			}
		}
	}
	return t
}

// write writes x as an object of version v.
func (t *table[T]) write(w *jw, v int, x *T) {
	w.begin('{')
	for i := range t.by[v] {
		f := &t.by[v][i]
		w.key(f.name)
		f.put(w, x)
	}
	w.end('}')
}

// f is a field in every version.
func f[T any](name string, put func(w *jw, x *T)) field[T] {
	return field[T]{name: name, put: put}
}

// since is a field from version v on.
func since[T any](v int, name string, put func(w *jw, x *T)) field[T] {
	return field[T]{name: name, span: span{since: v}, put: put}
}

// until is a field up to version v.
func until[T any](v int, name string, put func(w *jw, x *T)) field[T] {
	return field[T]{name: name, span: span{until: v}, put: put}
}

// Common value writers for table rows.

func str[T any](get func(x *T) string) func(w *jw, x *T) {
	return func(w *jw, x *T) { w.str(get(x)) }
}

func constStr[T any](s string) func(w *jw, x *T) {
	return func(w *jw, _ *T) { w.str(s) }
}

func constInt[T any](n int64) func(w *jw, x *T) {
	return func(w *jw, _ *T) { w.int(n) }
}

func constBool[T any](b bool) func(w *jw, x *T) {
	return func(w *jw, _ *T) { w.bool(b) }
}

func emptyList[T any]() func(w *jw, x *T) {
	return func(w *jw, _ *T) { w.arr(func() {}) }
}

func unsetNum[T any]() func(w *jw, x *T) {
	return func(w *jw, _ *T) { w.unset() }
}
