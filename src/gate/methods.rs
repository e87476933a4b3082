//! Which CDP methods the gate forwards, and what it checks or rewrites in
//! their parameters: policy as data.
//!
//! The list is what agent-browser sends for the allow-listed subcommands
//! (recorded from its traffic, see docs/design.md, "The browser gate"), and
//! nothing that reaches outside the page: no download behaviour (Chromium
//! is not confined, so a download path is a write anywhere), file uploads,
//! PDFs or traces written by the browser, cookies or storage, permissions,
//! screencasts, request interception or the browser's own lifecycle. A
//! method not listed is refused, and the refusal is audited.

/// What the gate does with one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Treatment {
    /// Forward unchanged.
    Pass,
    /// Forward only if the URL in this parameter (when present) has a
    /// scheme the policy allows, or is `about:blank`: the tab is policed
    /// before this reaches it, so the warden decides the rest on the request.
    CheckUrl(&'static str),
    /// Forward only if this parameter is absent, empty or `about:blank`: a
    /// new tab starts loading before anyone can police it.
    BlankOnly(&'static str),
}

/// The allowlist. Sorted by name; a test keeps it so.
const ALLOWED: &[(&str, Treatment)] = &[
    ("Accessibility.enable", Treatment::Pass),
    ("Accessibility.getFullAXTree", Treatment::Pass),
    ("Browser.getVersion", Treatment::Pass),
    ("Browser.getWindowForTarget", Treatment::Pass),
    ("DOM.describeNode", Treatment::Pass),
    ("DOM.enable", Treatment::Pass),
    ("DOM.getBoxModel", Treatment::Pass),
    ("DOM.getContentQuads", Treatment::Pass),
    ("DOM.getDocument", Treatment::Pass),
    ("DOM.getFrameOwner", Treatment::Pass),
    ("DOM.querySelector", Treatment::Pass),
    ("DOM.querySelectorAll", Treatment::Pass),
    ("DOM.resolveNode", Treatment::Pass),
    ("DOM.scrollIntoViewIfNeeded", Treatment::Pass),
    ("Emulation.setDeviceMetricsOverride", Treatment::Pass),
    ("Input.dispatchKeyEvent", Treatment::Pass),
    ("Input.dispatchMouseEvent", Treatment::Pass),
    ("Input.dispatchTouchEvent", Treatment::Pass),
    ("Input.insertText", Treatment::Pass),
    ("Network.enable", Treatment::Pass),
    ("Page.bringToFront", Treatment::Pass),
    ("Page.captureScreenshot", Treatment::Pass),
    ("Page.enable", Treatment::Pass),
    ("Page.getFrameTree", Treatment::Pass),
    ("Page.getLayoutMetrics", Treatment::Pass),
    ("Page.getNavigationHistory", Treatment::Pass),
    ("Page.handleJavaScriptDialog", Treatment::Pass),
    ("Page.navigate", Treatment::CheckUrl("url")),
    ("Page.navigateToHistoryEntry", Treatment::Pass),
    ("Page.reload", Treatment::Pass),
    ("Page.setLifecycleEventsEnabled", Treatment::Pass),
    ("Page.stopLoading", Treatment::Pass),
    ("Runtime.callFunctionOn", Treatment::Pass),
    ("Runtime.enable", Treatment::Pass),
    ("Runtime.evaluate", Treatment::Pass),
    ("Runtime.getProperties", Treatment::Pass),
    ("Runtime.releaseObject", Treatment::Pass),
    ("Runtime.releaseObjectGroup", Treatment::Pass),
    ("Runtime.runIfWaitingForDebugger", Treatment::Pass),
    ("Target.activateTarget", Treatment::Pass),
    ("Target.attachToTarget", Treatment::Pass),
    ("Target.closeTarget", Treatment::Pass),
    ("Target.createTarget", Treatment::BlankOnly("url")),
    ("Target.detachFromTarget", Treatment::Pass),
    ("Target.getTargetInfo", Treatment::Pass),
    ("Target.getTargets", Treatment::Pass),
    ("Target.setAutoAttach", Treatment::Pass),
    ("Target.setDiscoverTargets", Treatment::Pass),
    // Lists the tools a page declares to agents; calling one is not allowed.
    ("WebMCP.enable", Treatment::Pass),
];

/// How the gate treats `method`; `None` means refused.
pub(super) fn treatment(method: &str) -> Option<Treatment> {
    ALLOWED
        .binary_search_by(|(name, _)| (*name).cmp(method))
        .ok()
        .map(|i| ALLOWED[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowlist_is_sorted_and_has_no_duplicates() {
        for pair in ALLOWED.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{} then {}", pair[0].0, pair[1].0);
        }
    }

    #[test]
    fn methods_that_reach_outside_the_page_are_refused() {
        for method in [
            "Browser.close",
            "Browser.crash",
            "Browser.grantPermissions",
            "Browser.setDownloadBehavior",
            "DOM.setFileInputFiles",
            "Fetch.enable",
            "IO.read",
            "Network.getCookies",
            "Network.setCookie",
            "Page.printToPDF",
            "Page.setDownloadBehavior",
            "Page.startScreencast",
            "Security.setIgnoreCertificateErrors",
            "Storage.clearDataForOrigin",
            "SystemInfo.getProcessInfo",
            "Target.exposeDevToolsProtocol",
            "Tracing.start",
        ] {
            assert_eq!(treatment(method), None, "{method}");
        }
    }

    #[test]
    fn the_methods_that_navigate_have_their_url_checked() {
        assert_eq!(treatment("Page.navigate"), Some(Treatment::CheckUrl("url")));
        assert_eq!(
            treatment("Target.createTarget"),
            Some(Treatment::BlankOnly("url"))
        );
    }
}
