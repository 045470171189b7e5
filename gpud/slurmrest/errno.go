package slurmrest

// Slurm's error numbers (slurm_errno.h) that gpud's answers use, so that
// clients which branch on error_number see the number Slurm would give.
const (
	errGeneric            = -1
	errCtldConnection     = 1800  // SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR
	errNoChange           = 1900  // SLURM_NO_CHANGE_IN_DATA
	errInvalidPartition   = 2000  // ESLURM_INVALID_PARTITION_NAME
	errAccessDenied       = 2002  // ESLURM_ACCESS_DENIED
	errInvalidNodeCount   = 2006  // ESLURM_INVALID_NODE_COUNT
	errScriptMissing      = 2009  // ESLURM_JOB_SCRIPT_MISSING
	errInvalidJobID       = 2017  // ESLURM_INVALID_JOB_ID
	errInvalidNodeName    = 2018  // ESLURM_INVALID_NODE_NAME
	errAlreadyDone        = 2021  // ESLURM_ALREADY_DONE
	errInvalidNodeState   = 2028  // ESLURM_INVALID_NODE_STATE
	errNotSupported       = 2036  // ESLURM_NOT_SUPPORTED
	errInvalidAccount     = 2045  // ESLURM_INVALID_ACCOUNT
	errAccountingPolicy   = 2050  // ESLURM_ACCOUNTING_POLICY
	errInvalidTimeLimit   = 2051  // ESLURM_INVALID_TIME_LIMIT
	errReservationInvalid = 2053  // ESLURM_RESERVATION_INVALID
	errInvalidTimeValue   = 2054  // ESLURM_INVALID_TIME_VALUE
	errInvalidWCKey       = 2057  // ESLURM_INVALID_WCKEY
	errMissingWorkDir     = 2063  // ESLURM_MISSING_WORK_DIR
	errInvalidQOS         = 2066  // ESLURM_INVALID_QOS
	errInvalidGres        = 2072  // ESLURM_INVALID_GRES
	errInternal           = 2090  // ESLURM_INTERNAL
	errTooManyRPCs        = 4034  // ESLURMD_TOO_MANY_RPCS
	errDBConnection       = 7000  // ESLURM_DB_CONNECTION
	errRESTInvalidQuery   = 9000  // ESLURM_REST_INVALID_QUERY
	errRESTFailParsing    = 9001  // ESLURM_REST_FAIL_PARSING
	errRESTInvalidJobDesc = 9002  // ESLURM_REST_INVALID_JOBS_DESC
	errRESTEmptyResult    = 9003  // ESLURM_REST_EMPTY_RESULT
	errUnknownURLMethod   = 9007  // ESLURM_REST_UNKNOWN_URL_METHOD
	errRESTAuthFail       = 9008  // ESLURM_REST_AUTH_FAIL
	errDataConvFailed     = 9202  // ESLURM_DATA_CONV_FAILED
	errUTF8               = 9301  // ESLURM_UTF8_INVALID_READ
	errHTTPTooLarge       = 12016 // ESLURM_HTTP_CONTENT_LENGTH_TOO_LARGE
	errHTTPMime           = 12019 // ESLURM_HTTP_UNKNOWN_ACCEPT_MIME_TYPE
	errUnknownURL         = 11008 // ESLURM_URL_INVALID_PATH
)

var errNames = map[int]string{
	errGeneric:            "Unspecified error",
	errCtldConnection:     "Unable to contact the controller (not the leader)",
	errNoChange:           "Data has not changed since time specified",
	errInvalidPartition:   "Invalid partition name specified",
	errAccessDenied:       "Access/permission denied",
	errInvalidNodeCount:   "Node count specification invalid",
	errScriptMissing:      "Batch script is missing",
	errInvalidJobID:       "Invalid job id specified",
	errInvalidNodeName:    "Invalid node name specified",
	errAlreadyDone:        "Job/step already completing or completed",
	errInvalidNodeState:   "Invalid node state specified",
	errNotSupported:       "Requested operation is presently disabled",
	errInvalidAccount:     "Invalid account or account/partition combination specified",
	errAccountingPolicy:   "Job violates accounting/QOS policy",
	errInvalidTimeLimit:   "Requested time limit is invalid",
	errReservationInvalid: "Requested reservation is invalid",
	errInvalidTimeValue:   "Invalid time specified",
	errInvalidWCKey:       "Invalid wckey specification",
	errMissingWorkDir:     "Missing working directory",
	errInvalidQOS:         "Invalid qos specification",
	errInvalidGres:        "Invalid generic resource (gres) specification",
	errInternal:           "Unexpected internal error",
	errTooManyRPCs:        "Too many requests; retry later",
	errDBConnection:       "Unable to connect to the accounting database",
	errRESTInvalidQuery:   "Query empty or not RFC compliant",
	errRESTFailParsing:    "Failed to parse query",
	errRESTInvalidJobDesc: "Invalid job description",
	errRESTEmptyResult:    "Nothing found with query",
	errUnknownURLMethod:   "Unknown URL path or method",
	errRESTAuthFail:       "Authentication failure",
	errDataConvFailed:     "Unable to convert data type",
	errUTF8:               "Invalid UTF-8",
	errHTTPTooLarge:       "Content-Length is too large",
	errHTTPMime:           "Unknown Accept MIME type",
	errUnknownURL:         "Invalid URL path",
}

// errName is the error field Slurm writes beside error_number.
func errName(n int) string {
	if s, ok := errNames[n]; ok {
		return s
	}
	return "Unspecified error"
}
