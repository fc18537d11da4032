package io.rota.client;

import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * One page of a list, newest first, with the cursor of the next page. Immutable.
 *
 * @param <T> what the page lists
 */
public final class Page<T> {
  private final List<T> items;
  private final String next;

  Page(List<T> items, String next) {
    this.items = Collections.unmodifiableList(items);
    this.next = next;
  }

  /**
   * The page's items.
   *
   * @return an unmodifiable list, maybe empty
   */
  public List<T> items() {
    return items;
  }

  /**
   * The cursor of the next page, to pass back as {@code after}.
   *
   * @return the cursor, empty on the last page
   */
  public Optional<String> next() {
    return Optional.ofNullable(next);
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof Page)) {
      return false;
    }
    Page<?> p = (Page<?>) o;
    return items.equals(p.items) && Objects.equals(next, p.next);
  }

  @Override
  public int hashCode() {
    return Objects.hash(items, next);
  }

  @Override
  public String toString() {
    return "Page{items=" + items + ", next=" + next + "}";
  }
}
