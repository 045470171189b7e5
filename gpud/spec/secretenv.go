package spec

import "strings"

// MaskedValue replaces a secret variable's value where a job's
// environment is shown to someone other than its owner.
const MaskedValue = "(masked)"

// credentialWords mark a GPUD_* variable as a credential.
var credentialWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"}

// CredentialEnv says whether the environment variable name is a gpud
// credential: GPUD_TOKEN, or any GPUD_* variable whose name contains
// TOKEN, SECRET, PASSWORD, PASSWD, KEY or CREDENTIAL. Credentials never
// travel with a job: the bearer of a user's token can act as that user.
func CredentialEnv(name string) bool {
	rest, ok := strings.CutPrefix(strings.ToUpper(name), "GPUD_")
	if !ok {
		return false
	}
	for _, w := range credentialWords {
		if strings.Contains(rest, w) {
			return true
		}
	}
	return false
}

// SecretEnv says whether name is a credential (CredentialEnv) or listed
// in site (gpud.toml's [auth] secret_env): an exact name, or a prefix
// ending in '*' ("AWS_*").
func SecretEnv(name string, site []string) bool {
	if CredentialEnv(name) {
		return true
	}
	for _, s := range site {
		if p, ok := strings.CutSuffix(s, "*"); ok {
			if strings.HasPrefix(name, p) {
				return true
			}
		} else if name == s {
			return true
		}
	}
	return false
}

// DropSecretEnv returns env (KEY=VALUE entries) without its secret
// variables, and the names it dropped. env itself is not modified.
func DropSecretEnv(env, site []string) (kept, dropped []string) {
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if SecretEnv(k, site) {
			dropped = append(dropped, k)
			continue
		}
		kept = append(kept, kv)
	}
	if dropped == nil {
		return env, nil
	}
	if kept == nil {
		kept = []string{}
	}
	return kept, dropped
}

// SensitiveEnv says whether name looks like a secret's: it contains
// TOKEN, SECRET, PASSWORD, PASSWD, KEY or CREDENTIAL, in any case
// (SECRET_PASSWORD, DB_PASSWD, OPENAI_API_KEY, HF_TOKEN). Such a variable
// travels with its job (the job may need it), but its value is masked
// wherever the job is shown to anyone but its owner, as if the site had
// listed it in secret_env.
func SensitiveEnv(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range credentialWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	return false
}

// MaskSecretEnv returns a copy of env whose secret variables' values
// (SecretEnv, and SensitiveEnv's names) are MaskedValue: the names stay,
// they say what the job was given.
func MaskSecretEnv(env, site []string) []string {
	var out []string
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !SecretEnv(k, site) && !SensitiveEnv(k) {
			continue
		}
		if out == nil {
			out = append([]string(nil), env...)
		}
		out[i] = k + "=" + MaskedValue
	}
	if out == nil {
		return env
	}
	return out
}
