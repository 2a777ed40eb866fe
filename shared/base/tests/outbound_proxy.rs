//! The service's one outbound client goes where it is told, never through a proxy the
//! environment names (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`): a variable set in a function's
//! configuration must not send the provider's token, the facilitator's calls or the node's
//! answers through another host. (A test binary of its own: it sets the process's environment.)

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn the_outbound_client_ignores_the_proxy_variables() {
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    // SAFETY: this binary's one test sets them before any other thread reads the environment.
    unsafe {
        for name in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "all_proxy",
        ] {
            std::env::set_var(name, &proxy_url);
        }
        std::env::remove_var("NO_PROXY");
        std::env::remove_var("no_proxy");
    }
    let answer = |listener: tokio::net::TcpListener, status: &'static str| async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 1024];
        let _ = socket.read(&mut request).await;
        let response = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
        socket.write_all(response.as_bytes()).await.unwrap();
    };
    let url = format!("http://{}/", target.local_addr().unwrap());
    tokio::spawn(answer(target, "204 No Content"));
    let proxied = tokio::spawn(answer(proxy, "502 Bad Gateway"));
    let client = base::outbound::build(base::outbound::Roots::CompiledIn).unwrap();
    let res = client.get(url).send().await.unwrap();
    assert_eq!(res.status(), 204, "answered by the proxy");
    assert!(!proxied.is_finished(), "the proxy was connected to");
}
