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
	// Names that look like secrets are masked too, not dropped (a job
	// may need its database password); issue 24: operators saw
	// SECRET_PASSWORD unless the site listed it.
	env = []string{"SECRET_PASSWORD=hunter2", "db_passwd=x", "OPENAI_API_KEY=sk", "HF_TOKEN=hf", "MY_CREDENTIALS=c", "HOME=/h", "LANG=C"}
	if kept, dropped := DropSecretEnv(env, nil); !slices.Equal(kept, env) || dropped != nil {
		t.Errorf("DropSecretEnv of secret-looking names = %q, %q; want them kept for the job", kept, dropped)
	}
	want := []string{"SECRET_PASSWORD=" + MaskedValue, "db_passwd=" + MaskedValue, "OPENAI_API_KEY=" + MaskedValue, "HF_TOKEN=" + MaskedValue,
		"MY_CREDENTIALS=" + MaskedValue, "HOME=/h", "LANG=C"}
	if got := MaskSecretEnv(env, nil); !slices.Equal(got, want) {
		t.Errorf("MaskSecretEnv(secret-looking names) = %q; want %q", got, want)
	}
}
