//! Headless Chromium driven over WebDriver (Debian's `chromium` and `chromium-driver`,
//! installed by `tests/tools/install-chromium` on first use) for the web UI's tests.

use fantoccini::{Client, ClientBuilder, Locator};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a page may take to show what a step waits for.
pub const UI_WAIT: Duration = Duration::from_secs(15);

/// A chromedriver process and a browser session on it; both end when dropped or closed.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Browser {
    /// Starts chromedriver and a headless Chromium window of `width` x `height`.
    pub async fn start(width: u32, height: u32) -> Browser {
        let bin = super::tool("/usr/bin/chromedriver", "install-chromium");
        let port = free_port();
        let driver = Command::new(bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         format!("--window-size={width},{height}")],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let start = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => break c,
                Err(e) if start.elapsed() > Duration::from_secs(30) => {
                    panic!("no WebDriver session: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        Browser { client, driver }
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// Waits for an element matching `css` and returns it.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(UI_WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"))
    }

    /// Whether an element matching `css` is on the page now.
    pub async fn has(&self, css: &str) -> bool {
        !self
            .client
            .find_all(Locator::Css(css))
            .await
            .expect("find")
            .is_empty()
    }

    /// Types `text` into the field `css` (after clearing it).
    pub async fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        el.clear().await.expect("clear");
        el.send_keys(text).await.expect("type");
    }

    /// Chooses `value` in the select `css`.
    pub async fn choose(&self, css: &str, value: &str) {
        self.find(css)
            .await
            .select_by_value(value)
            .await
            .expect("select");
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.expect("click");
    }

    /// Clicks `css` and accepts the confirmation dialog it opens.
    pub async fn click_and_confirm(&self, css: &str) {
        self.click(css).await;
        let start = Instant::now();
        while self.client.accept_alert().await.is_err() {
            assert!(
                start.elapsed() < UI_WAIT,
                "no confirmation dialog after {css}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The text of `css` once it contains `wanted`; fails after [`UI_WAIT`] with what it had.
    pub async fn wait_text(&self, css: &str, wanted: &str) -> String {
        let start = Instant::now();
        loop {
            let text = match self.client.find(Locator::Css(css)).await {
                Ok(el) => el.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if text.contains(wanted) {
                return text;
            }
            assert!(
                start.elapsed() < UI_WAIT,
                "{css} never showed {wanted:?}; it shows {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs a script in the page and returns its result.
    pub async fn eval(&self, script: &str) -> serde_json::Value {
        self.client
            .execute(script, Vec::new())
            .await
            .expect("script")
    }

    /// Writes a screenshot of the window to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(path, png).expect("write screenshot");
    }

    /// Logs in through the UI's form as `user`.
    pub async fn log_in(&self, base: &str, user: &str, pass: &str) {
        self.open(&format!("{base}/#/")).await;
        self.type_into("#login-user", user).await;
        self.type_into("#login-password", pass).await;
        self.click("#login-submit").await;
        self.find("#logout").await;
    }
}
