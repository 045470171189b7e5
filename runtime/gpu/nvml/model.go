package nvml

import "strings"

// brandWords are marketing words NVML puts between "NVIDIA" and the model.
var brandWords = map[string]bool{"tesla": true, "geforce": true, "quadro": true}

// knownModels maps NVML product-name prefixes (after "NVIDIA ") whose
// short name is not simply their first token.
var knownModels = []struct{ prefix, model string }{
	{"gh200", "gh200"},
	{"gb200", "gb200"},
	{"rtx pro 6000", "rtxpro6000"},
}

// ModelName returns the short lower-case model users ask for with
// --gpus=h100:2: "NVIDIA H100 80GB HBM3" → "h100", "NVIDIA A100-SXM4-40GB"
// → "a100". Unlisted names fall back to the first token after "NVIDIA"
// (and any brand word), cut at the first '-', lower-cased; "RTX 4090"
// style names keep the series ("rtx4090").
func ModelName(name string) string {
	fields := strings.Fields(strings.ToLower(name))
	for i, f := range fields {
		if f == "nvidia" {
			fields = fields[i+1:]
			break
		}
	}
	for len(fields) > 0 && brandWords[fields[0]] {
		fields = fields[1:]
	}
	if len(fields) == 0 {
		return "unknown"
	}
	rest := strings.Join(fields, " ")
	for _, k := range knownModels {
		if strings.HasPrefix(rest, k.prefix) {
			return k.model
		}
	}
	first, _, _ := strings.Cut(fields[0], "-")
	if (first == "rtx" || first == "gtx") && len(fields) > 1 {
		next, _, _ := strings.Cut(fields[1], "-")
		return first + next
	}
	return first
}
