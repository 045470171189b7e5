// Package auth owns remote identity: the controller's TLS material (a
// private CA and a server certificate it signs, generated on first start)
// and the signed bearer tokens (JWT, HS256) that name a remote caller's
// user, uid and role, or bind a node agent to its node name.
//
// Local callers never need it: on the unix socket the peer's credentials
// are the identity. Over TCP the controller serves HTTPS only and every
// request but /healthz carries "Authorization: Bearer <token>".
//
// It imports only the standard library and github.com/golang-jwt/jwt/v5;
// gpud/server and gpud main use it, gpud/api (stdlib only) does not.
package auth
