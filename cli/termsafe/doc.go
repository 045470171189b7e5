// Package termsafe escapes control characters in what gpuq and gpusubmit
// print, so text another user chose (a job name, comment, reason, script
// or environment, even one stored before the controller refused control
// characters) cannot drive the reader's terminal. Newline and tab pass;
// every other C0 character, DEL and the C1 controls (U+0080-U+009F, which
// some terminals obey as CSI and friends) become \u00XX: visible as text,
// and the same escape a JSON string would use, so JSON output stays valid
// and decodes to the same value.
//
// It imports the standard library only, so both CLIs can use it.
package termsafe
