package spec

import (
	"slices"
	"testing"
)

func TestSecretEnv(t *testing.T) {
	site := []string{"AWS_SECRET_ACCESS_KEY", "VAULT_*"}
	for name, want := range map[string]bool{
		"GPUD_TOKEN": true, "GPUD_JOIN_TOKEN": true, "GPUD_API_KEY": true, "gpud_token": true,
		"GPUD_CONTROLLER": false, "GPUD_CA": false, "GPUD_JOB_ID": false, "TOKEN": false,
		"AWS_SECRET_ACCESS_KEY": true, "AWS_REGION": false, "VAULT_ADDR": true, "VAULT": false, "PATH": false,
	} {
		if got := SecretEnv(name, site); got != want {
			t.Errorf("SecretEnv(%q) = %v, want %v", name, got, want)
		}
	}
	env := []string{"PATH=/bin", "GPUD_TOKEN=eyJ.secret", "AWS_SECRET_ACCESS_KEY=abc", "HOME=/home/a"}
	kept, dropped := DropSecretEnv(env, site)
	if !slices.Equal(kept, []string{"PATH=/bin", "HOME=/home/a"}) || !slices.Equal(dropped, []string{"GPUD_TOKEN", "AWS_SECRET_ACCESS_KEY"}) {
		t.Errorf("DropSecretEnv = %q, %q", kept, dropped)
	}
	masked := MaskSecretEnv(env, site)
	if !slices.Equal(masked, []string{"PATH=/bin", "GPUD_TOKEN=" + MaskedValue, "AWS_SECRET_ACCESS_KEY=" + MaskedValue, "HOME=/home/a"}) {
		t.Errorf("MaskSecretEnv = %q", masked)
	}
	if env[1] != "GPUD_TOKEN=eyJ.secret" {
		t.Errorf("MaskSecretEnv modified its input")
	}
}
