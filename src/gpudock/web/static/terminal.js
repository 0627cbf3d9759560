// gpudock console: the instance page's terminal. xterm.js (vendored) draws it; a
// WebSocket carries terminal bytes as binary frames and control messages as JSON
// text frames (web/terminals.py describes both). A dropped socket reconnects to
// the same shell with the session token and the byte offset already shown, so
// nothing is lost or shown twice; the token lives in sessionStorage, so a reload
// of this tab finds its shell again and another tab gets a shell of its own.
(function () {
  "use strict";
  var card = document.querySelector("[data-terminal]");
  if (!card || !window.Terminal || !window.FitAddon) { return; }

  // xterm.js adds <style> elements; the page's CSP admits them by this nonce only.
  var nonce = card.getAttribute("data-style-nonce");
  var createElement = document.createElement;
  document.createElement = function (name) {
    var element = createElement.apply(document, arguments);
    if (nonce && String(name).toLowerCase() === "style") { element.setAttribute("nonce", nonce); }
    return element;
  };

  var screen = card.querySelector("[data-terminal-screen]");
  var state = card.querySelector("[data-terminal-state]");
  var openButton = card.querySelector("[data-terminal-open]");
  var closeButton = card.querySelector("[data-terminal-close]");
  var storageKey = "gpudock-terminal:" + card.getAttribute("data-url");
  var encoder = new TextEncoder();
  var term = null, fit = null, socket = null;
  var received = 0, retries = 0, wanted = false, retryTimer = null;
  var MAX_RETRY_MS = 10000;

  function say(key) { state.textContent = card.getAttribute("data-msg-" + key) || ""; state.setAttribute("data-state", key); }
  function notice(text) { term.write("\r\n\x1b[2m[" + text + "]\x1b[0m\r\n"); }
  function token() { try { return sessionStorage.getItem(storageKey) || ""; } catch (e) { return ""; } }
  function remember(value) {
    try { if (value) { sessionStorage.setItem(storageKey, value); } else { sessionStorage.removeItem(storageKey); } } catch (e) { /* private mode */ }
  }
  function send(data) { if (socket && socket.readyState === WebSocket.OPEN) { socket.send(data); } }

  function socketUrl() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var query = "?cols=" + term.cols + "&rows=" + term.rows;
    var shell = token();
    if (shell) { query += "&session=" + encodeURIComponent(shell) + "&offset=" + received; }
    return scheme + location.host + card.getAttribute("data-url") + query;
  }

  function onControl(message) {
    if (message.type === "attached") {
      if (message.offset !== received) { term.reset(); }  // what we had is gone or not ours
      if (!message.resumed && token()) { notice(card.getAttribute("data-msg-new-shell")); }
      received = message.offset;
      remember(message.session);
      retries = 0;
      say("connected");
    } else if (message.type === "exit") {
      wanted = false;
      remember("");
      var status = message.status === null ? "?" : String(message.status);
      notice(card.getAttribute("data-msg-exited").replace("{status}", status));
      say("closed");
      showOpen(true);
    } else if (message.type === "error") {
      wanted = false;
      notice(message.message);
      say("closed");
      showOpen(true);
    }
  }

  function connect() {
    say(received || token() ? "reconnecting" : "connecting");
    socket = new WebSocket(socketUrl());
    socket.binaryType = "arraybuffer";
    socket.onmessage = function (event) {
      if (typeof event.data === "string") {
        onControl(JSON.parse(event.data));
      } else {
        var bytes = new Uint8Array(event.data);
        received += bytes.length;
        term.write(bytes);
      }
    };
    socket.onclose = function (event) {
      socket = null;
      if (event.code === 4001) {  // opened in another tab or window
        wanted = false;
        notice(card.getAttribute("data-msg-elsewhere"));
        say("closed");
        showOpen(true);
        return;
      }
      if (!wanted) { return; }
      say("reconnecting");
      var delay = Math.min(500 * Math.pow(2, retries), MAX_RETRY_MS);
      retries += 1;
      retryTimer = setTimeout(connect, delay);
    };
  }

  function showOpen(open) {
    openButton.hidden = !open;
    closeButton.hidden = open;
  }

  function start() {
    if (!term) {
      term = new window.Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000 });
      fit = new window.FitAddon.FitAddon();
      term.loadAddon(fit);
      screen.hidden = false;
      term.open(screen);
      fit.fit();
      term.onData(function (data) { send(encoder.encode(data)); });
      term.onBinary(function (data) {
        var bytes = new Uint8Array(data.length);
        for (var i = 0; i < data.length; i += 1) { bytes[i] = data.charCodeAt(i) & 255; }
        send(bytes);
      });
      term.onResize(function (size) { send(JSON.stringify({ type: "resize", cols: size.cols, rows: size.rows })); });
      new ResizeObserver(function () { fit.fit(); }).observe(screen);
    }
    wanted = true;
    retries = 0;
    showOpen(false);
    connect();
    term.focus();
  }

  function stop() {
    wanted = false;
    clearTimeout(retryTimer);
    send(JSON.stringify({ type: "hangup" }));
    remember("");
    if (socket) { socket.close(1000); }
    say("closed");
    showOpen(true);
  }

  openButton.addEventListener("click", start);
  closeButton.addEventListener("click", stop);
  if (token()) { start(); }  // this tab had a shell before the reload: back to it
})();
