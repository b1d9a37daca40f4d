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
//!
//! Logging in needs no cookie, so the header cannot protect it: a page of another site can
//! post a form (or a `text/plain` `fetch`) to `POST /v1/auth/session` with the attacker's
//! password and leave the victim's browser logged in as the attacker (login CSRF). Logins
//! are therefore refused when the browser says they come from elsewhere
//! ([`login_refusal`]): by `Sec-Fetch-Site`, or by an `Origin` that is not this server.
//! Clients that are not browsers send neither header and are unaffected.

use axum::http::header::{COOKIE, HOST, ORIGIN};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderName, Uri};

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
    if sent_from_another_site(headers) {
        return CookieSession::Refused(
            "a console session cookie is not accepted on a request from another site",
        );
    }
    CookieSession::Usable(token)
}

/// Whether the browser says another site, or another origin of this site, started the
/// request (`Sec-Fetch-Site` other than `same-origin` or `none`, the latter being what
/// the user typed or bookmarked). Without the header, nothing is known.
pub fn sent_from_another_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .is_some_and(|site| site != "same-origin" && site != "none")
}

/// Why a login (`POST /v1/auth/login` or `/v1/auth/session`) must be refused as possibly
/// forged by another site, if it must: the browser says so in `Sec-Fetch-Site`, or the
/// request has an `Origin` that is neither this server as the request names it (`Host`,
/// or the authority of an HTTP/2 request's URI) nor `public_url` (for proxies that
/// rewrite `Host`). `Origin: null` (sandboxed frames, `data:` pages, some redirects) is
/// foreign. Requests with neither header (the CLI, the SDKs, curl) are never refused.
pub fn login_refusal(
    headers: &HeaderMap,
    uri_authority: Option<&Authority>,
    public_url: &str,
) -> Option<&'static str> {
    if sent_from_another_site(headers) {
        return Some(
            "login refused: the browser says this request comes from another site (Sec-Fetch-Site); log in from the console's own page (cross-site request forgery protection)",
        );
    }
    let origin = headers.get(ORIGIN)?;
    let origin = origin.to_str().unwrap_or("null");
    let host = headers
        .get(HOST)
        .and_then(|host| host.to_str().ok())
        .or_else(|| uri_authority.map(Authority::as_str));
    let ours = host.is_some_and(|host| same_origin_as_host(origin, host))
        || same_origin_as_url(origin, public_url);
    if ours {
        return None;
    }
    Some(
        "login refused: the request's Origin is not this server (it does not match the Host header); log in from the console's own page (cross-site request forgery protection)",
    )
}

/// An `Origin` header's scheme, host and port (the scheme's default when it names none);
/// `None` for `null` and anything that is not an http(s) origin.
fn origin_parts(origin: &str) -> Option<(&str, String, u16)> {
    let uri: Uri = origin.parse().ok()?;
    let (scheme, default_port) = match uri.scheme_str()? {
        "http" => ("http", 80),
        "https" => ("https", 443),
        _ => return None,
    };
    let authority = uri.authority()?;
    let port = authority.port_u16().unwrap_or(default_port);
    Some((scheme, authority.host().to_ascii_lowercase(), port))
}

/// Whether `origin` names the server a `Host` header names. `Host` carries no scheme, so
/// only host and port are compared (one port serves one scheme); a port it leaves out is
/// the origin's scheme's default.
fn same_origin_as_host(origin: &str, host: &str) -> bool {
    let Some((scheme, origin_host, origin_port)) = origin_parts(origin) else {
        return false;
    };
    let Ok(host) = host.parse::<Authority>() else {
        return false;
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    host.host().eq_ignore_ascii_case(&origin_host)
        && host.port_u16().unwrap_or(default_port) == origin_port
}

/// Whether `origin` is the origin of `url` (the server's configured public URL).
fn same_origin_as_url(origin: &str, url: &str) -> bool {
    let url = url.trim_end_matches('/');
    match (origin_parts(origin), origin_parts(url)) {
        (Some(origin), Some(url)) => origin == url,
        _ => false,
    }
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
    fn logins_from_another_site_are_refused() {
        let public = "https://atoll.example.com";
        let refused = |pairs: &[(&str, &str)]| login_refusal(&headers(pairs), None, public);
        let host = ("host", "127.0.0.1:8080");
        // Not a browser, or the browser's own navigation: nothing to refuse.
        assert_eq!(refused(&[]), None);
        assert_eq!(refused(&[host]), None);
        assert_eq!(refused(&[host, ("sec-fetch-site", "none")]), None);
        // The console's own page.
        for origin in ["http://127.0.0.1:8080", "HTTP://127.0.0.1:8080"] {
            assert_eq!(
                refused(&[host, ("origin", origin), ("sec-fetch-site", "same-origin")]),
                None
            );
        }
        // Default ports, left out by either side.
        assert_eq!(
            refused(&[
                ("host", "example.com"),
                ("origin", "https://example.com:443")
            ]),
            None
        );
        assert_eq!(
            refused(&[("host", "example.com:80"), ("origin", "http://example.com")]),
            None
        );
        // Behind a proxy that rewrites Host, the public URL is ours too.
        assert_eq!(
            refused(&[host, ("origin", "https://atoll.example.com")]),
            None
        );
        // Another site, another origin of the site, or no origin at all.
        for site in ["cross-site", "same-site"] {
            assert!(refused(&[host, ("sec-fetch-site", site)]).is_some());
        }
        for origin in [
            "https://evil.example",
            "http://127.0.0.1:8081",
            "http://127.0.0.1",
            "null",
            "",
            "file://",
        ] {
            assert!(
                refused(&[host, ("origin", origin)]).is_some(),
                "{origin} was taken for this server"
            );
        }
        // An origin and no way to tell which server the request named.
        assert!(refused(&[("origin", "http://127.0.0.1:8080")]).is_some());
        let authority = "127.0.0.1:8080".parse::<Authority>().unwrap();
        assert_eq!(
            login_refusal(
                &headers(&[("origin", "http://127.0.0.1:8080")]),
                Some(&authority),
                public
            ),
            None
        );
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
