//! relayfloor -port P -upstream URL [-threads N] [-connections N]: a bare proxy on the relay's
//! own HTTP stack (native/relay: a tokio runtime of N worker threads, hyper's HTTP/1.1 server
//! with the relay's connection settings, reqwest's pool with its client settings), deciding
//! nothing and telling no one: each request read whole, forwarded to the upstream (its path
//! appended to the upstream's), the answer streamed back frame by frame as it comes. What the
//! relay's threads add with no event loop behind them: the floor bench/model_endpoint.py reads
//! the native relay's figures against (`--floor rust`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// RFC 9110 §7.6.1, and the framing hyper sets itself (as the relay drops them).
const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

type Out = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

fn answer(status: StatusCode, text: String) -> Response<Out> {
    let mut response = Response::new(Full::new(Bytes::from(text)).map_err(|e| e.into()).boxed());
    *response.status_mut() = status;
    response
}

async fn handle(
    client: Arc<reqwest::Client>,
    base: Arc<String>,
    request: Request<Incoming>,
) -> Result<Response<Out>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => return Ok(answer(StatusCode::BAD_REQUEST, error.to_string())),
    };
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut out = client.request(parts.method, format!("{base}{target}"));
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out = out.header(name, value);
        }
    }
    let upstream = match out.body(body).send().await {
        Ok(upstream) => upstream,
        Err(error) => return Ok(answer(StatusCode::BAD_GATEWAY, error.to_string())),
    };
    let upstream: hyper::Response<reqwest::Body> = upstream.into();
    let (mut head, body) = upstream.into_parts();
    for name in HOP_BY_HOP {
        head.headers.remove(name);
    }
    Ok(Response::from_parts(head, body.map_err(|e| e.into()).boxed()))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut port, mut upstream, mut threads, mut connections) = (0u16, String::new(), 2, 100);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.trim_start_matches('-') {
            "port" => port = value.parse().expect("-port"),
            "upstream" => upstream = value,
            "threads" => threads = value.parse().expect("-threads"),
            "connections" => connections = value.parse().expect("-connections"),
            _ => panic!("usage: relayfloor -port P -upstream URL [-threads N] [-connections N]"),
        }
    }
    assert!(upstream.starts_with("http://"), "-upstream http://HOST:PORT[/PATH]");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("relayfloor")
        .enable_all()
        .build()
        .expect("a runtime");
    // the relay's client: native/relay's Relay::new
    let client = Arc::new(
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(connections)
            .tcp_nodelay(true)
            .http1_title_case_headers()
            .read_timeout(Duration::from_secs(600))
            .build()
            .expect("a client"),
    );
    let base = Arc::new(upstream.trim_end_matches('/').to_owned());
    runtime.block_on(async move {
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let listener = tokio::net::TcpListener::bind(address).await.expect("bind");
        loop {
            // (SIGTERM's default action ends it)
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move {
                let service =
                    service_fn(move |request| handle(client.clone(), base.clone(), request));
                let _ = http1::Builder::new()
                    .keep_alive(true)
                    .title_case_headers(true)
                    .half_close(true)
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(60))
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}
