// Package config reads gpud's TOML configuration: gpud.toml for the
// controller (Controller) and node.toml for node agents (Node). It owns the
// defaults (Defaults, DefaultNode), loading in strict mode so unknown keys
// are errors, and Validate, which reports every problem at once, each
// naming its key ("[scheduler] interval: ...").
//
// The shipped etc/gpud.toml and etc/node.toml list every key with its
// default; tests keep them and the defaults in step.
//
// config imports only the standard library and go-toml: the controller,
// node agent and gpud main depend on it, and it must not pull in the
// scheduler, runtime or store. Constructors receive their own section;
// only config and main read files and the environment.
package config
