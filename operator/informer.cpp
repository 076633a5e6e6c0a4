#include "informer.hpp"

#include "cached.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

template <typename T>
Informer<T>::Informer(KubeClient& client, std::string kind, Resource resource, std::string ns, std::string selector,
                      std::chrono::seconds watch_timeout, Convert convert, Handler on_change, ErrorHandler on_error,
                      ListedHandler on_listed)
    : client_(client), kind_(std::move(kind)), resource_(std::move(resource)), namespace_(std::move(ns)),
      selector_(std::move(selector)), watch_timeout_(watch_timeout), convert_(std::move(convert)),
      on_change_(std::move(on_change)), on_error_(std::move(on_error)), on_listed_(std::move(on_listed)) {}

template <typename T>
Informer<T>::~Informer() {
  stop();
}

template <typename T>
void Informer<T>::start() {
  thread_ = std::thread([this] { run(); });
}

template <typename T>
void Informer<T>::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

// Retries double from 200 ms up to this: low, so that readiness returns within a few seconds of
// the API server coming back (a CRD re-applied after an empty restart answers 404 until then).
constexpr std::chrono::milliseconds kMaxBackoff{2000};

template <typename T>
void Informer<T>::run() {
  auto backoff = std::chrono::milliseconds(200);
  // Not ready until a list answers again; said, then retried after a doubling pause.
  const auto retry_later = [&](const char* what, int status) {
    failing_ = true;
    on_error_(kind_, what, status);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  };
  while (!stopping_) {
    try {
      // List: the cache becomes exactly the world, and every object is announced.
      std::vector<T> listed;
      std::string version;
      // A list without a resourceVersion is a consistent read: it holds every object whose
      // creation was acknowledged before it was asked for and that still exists.
      const auto asked_at = std::chrono::steady_clock::now();
      {
        json list = client_.list(resource_, namespace_, selector_);
        failing_ = false;
        version = list["metadata"].value("resourceVersion", "");
        listed.reserve(list["items"].size());
        for (auto& item : list["items"]) {
          item["kind"] = kind_;  // list items may come without kind
          listed.push_back(convert_(item));
        }
      }  // the full objects are not kept
      std::vector<T> gone;
      {
        std::lock_guard lock(mutex_);
        std::map<std::string, T> fresh;
        for (const auto& o : listed) fresh.insert_or_assign(o.key(), o);
        for (auto& [key, old] : cache_) {
          if (!fresh.contains(key)) gone.push_back(std::move(old));
        }
        cache_ = std::move(fresh);
      }
      synced_ = true;
      for (const auto& o : gone) on_change_("DELETED", o);
      for (const auto& o : listed) on_change_("ADDED", o);
      if (on_listed_) on_listed_(kind_, asked_at);
      listed = {};
      backoff = std::chrono::milliseconds(200);
      // Watch from there; a closed stream resumes from the last version seen.
      while (!stopping_) {
        version = client_.watch(resource_, namespace_, selector_, version, watch_timeout_,
                                [&](const KubeClient::WatchEvent& e) {
                                  failing_ = false;
                                  if (e.type == "BOOKMARK") return;
                                  json object = e.object;
                                  object["kind"] = kind_;
                                  T converted = convert_(object);
                                  {
                                    std::lock_guard lock(mutex_);
                                    if (e.type == "DELETED") {
                                      cache_.erase(converted.key());
                                    } else {
                                      cache_.insert_or_assign(converted.key(), converted);
                                    }
                                  }
                                  on_change_(e.type, converted);
                                });
        failing_ = false;
      }
    } catch (const KubeError& e) {
      if (e.status == 410) {
        ++relists_;  // too old: list again
        on_error_(kind_, e.what(), e.status);
        continue;
      }
      retry_later(e.what(), e.status);
    } catch (const WatchStalled& e) {
      retry_later(e.what(), kStalledWatch);  // a hung server: not ready until a list answers again
    } catch (const std::exception& e) {
      retry_later(e.what(), 0);  // connection refused or dropped, server restarting, an object we cannot read, …
    }
  }
}

template <typename T>
std::optional<T> Informer<T>::get(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

template <typename T>
std::vector<T> Informer<T>::matching(const std::function<bool(const T&)>& keep) const {
  std::lock_guard lock(mutex_);
  std::vector<T> out;
  for (const auto& [key, o] : cache_) {
    if (keep(o)) out.push_back(o);
  }
  return out;
}

template <typename T>
void Informer<T>::for_each(const std::function<void(const T&)>& visit) const {
  std::lock_guard lock(mutex_);
  for (const auto& [key, o] : cache_) visit(o);
}

template class Informer<CachedRun>;
template class Informer<CachedPod>;
template class Informer<CachedJob>;
template class Informer<CachedObject>;

}  // namespace dlbench::operator_
