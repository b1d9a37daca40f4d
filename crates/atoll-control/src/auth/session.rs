//! The web console's session: a login token held in an `HttpOnly` cookie.
//!
//! The console calls the same `/v1` routes as every client. A browser cannot be trusted to
//! keep a bearer token away from scripts, so `POST /v1/auth/session` puts the login token
//! in a cookie that scripts cannot read (`HttpOnly`), that the browser sends only on
//! requests made by this site (`SameSite=Strict`), and, behind TLS, only over TLS
//! (`Secure`).
//!
//! A cookie is sent by the browser on its own, which is what cross-site request forgery
//! abuses; so the cookie counts as a credential only on a request that also carries the
//! [`CSRF_HEADER`]. A page of another site cannot add a custom header to a request to
//! this one without a CORS preflight, which this server never grants, and a form or an
//! image cannot set headers at all. As a further check, a request whose `Sec-Fetch-Site`
//! says it came from another site is refused even with the header. Everything after that
//! is the ordinary principal and policy table: a session is its login token.

use axum::http::header::COOKIE;
use axum::http::{HeaderMap, HeaderName};

/// The cookie that holds the console's login token.
pub const SESSION_COOKIE: &str = "atoll_session";

/// The header that must come with the cookie (any non-empty value; the console sends `1`).
pub const CSRF_HEADER: HeaderName = HeaderName::from_static("x-atoll-csrf");

/// What a request's cookie session amounts to.
#[derive(Debug, PartialEq, Eq)]
pub enum CookieSession<'a> {
    /// No session cookie.
    Absent,
    /// A session cookie on a request that may use it: the login token it holds.
    Usable(&'a str),
    /// A session cookie on a request that could have been forged by another site.
    Refused(&'static str),
}

/// Reads the session cookie of a request and checks the request may use it.
pub fn cookie_session(headers: &HeaderMap) -> CookieSession<'_> {
    let Some(token) = session_cookie(headers) else {
        return CookieSession::Absent;
    };
    let has_csrf_header = headers
        .get(&CSRF_HEADER)
        .is_some_and(|value| !value.as_bytes().is_empty());
    if !has_csrf_header {
        return CookieSession::Refused(
            "a console session cookie counts only with the X-Atoll-CSRF header (cross-site request forgery protection); scripts send `Authorization: Bearer <token>` instead",
        );
    }
    let fetched_from = headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok());
    if fetched_from.is_some_and(|site| site != "same-origin" && site != "none") {
        return CookieSession::Refused(
            "a console session cookie is not accepted on a request from another site",
        );
    }
    CookieSession::Usable(token)
}

/// The value of the session cookie, if the request has one (of any `Cookie` header).
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

/// The `Set-Cookie` value that starts a session holding `token` for `max_age_seconds`.
/// `secure` when the API is served over TLS: the cookie then never travels in the clear.
pub fn start_cookie(token: &str, max_age_seconds: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_seconds}{secure}"
    )
}

/// The `Set-Cookie` value that makes the browser forget the session.
pub fn end_cookie(secure: bool) -> String {
    start_cookie("", 0, secure)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let map = headers(&[("cookie", "theme=dark; atoll_session=atoll_abc ; x=1")]);
        assert_eq!(session_cookie(&map), Some("atoll_abc"));
        let map = headers(&[("cookie", "a=1"), ("cookie", "atoll_session=atoll_def")]);
        assert_eq!(session_cookie(&map), Some("atoll_def"));
        assert_eq!(
            session_cookie(&headers(&[("cookie", "atoll_sessionx=1")])),
            None
        );
        assert_eq!(
            session_cookie(&headers(&[("cookie", "atoll_session=")])),
            None
        );
    }

    #[test]
    fn the_cookie_needs_the_csrf_header_and_a_same_site_request() {
        let cookie = ("cookie", "atoll_session=atoll_abc");
        assert_eq!(cookie_session(&headers(&[])), CookieSession::Absent);
        assert!(matches!(
            cookie_session(&headers(&[cookie])),
            CookieSession::Refused(_)
        ));
        assert!(matches!(
            cookie_session(&headers(&[cookie, ("x-atoll-csrf", "")])),
            CookieSession::Refused(_)
        ));
        assert_eq!(
            cookie_session(&headers(&[cookie, ("x-atoll-csrf", "1")])),
            CookieSession::Usable("atoll_abc")
        );
        assert_eq!(
            cookie_session(&headers(&[
                cookie,
                ("x-atoll-csrf", "1"),
                ("sec-fetch-site", "same-origin")
            ])),
            CookieSession::Usable("atoll_abc")
        );
        for site in ["cross-site", "same-site"] {
            assert!(matches!(
                cookie_session(&headers(&[
                    cookie,
                    ("x-atoll-csrf", "1"),
                    ("sec-fetch-site", site)
                ])),
                CookieSession::Refused(_)
            ));
        }
    }

    #[test]
    fn cookies_are_http_only_and_strict() {
        let cookie = start_cookie("atoll_abc", 60, false);
        assert_eq!(
            cookie,
            "atoll_session=atoll_abc; Path=/; HttpOnly; SameSite=Strict; Max-Age=60"
        );
        assert!(start_cookie("atoll_abc", 60, true).ends_with("; Secure"));
        assert!(end_cookie(false).starts_with("atoll_session=; "));
        assert!(end_cookie(false).contains("Max-Age=0"));
    }
}
