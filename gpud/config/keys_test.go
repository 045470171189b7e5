package config

import (
	"reflect"
)

// allKeys lists the leaf TOML key names of v's type, recursing into tables
// and arrays of tables.
func allKeys(v any) []string {
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := tomlTag(f)
			ft := f.Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft)
				continue
			}
			out = append(out, tag)
		}
	}
	walk(reflect.TypeOf(v))
	return out
}
