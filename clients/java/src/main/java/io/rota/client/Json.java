package io.rota.client;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.NullNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;

/** JSON and time helpers shared by the value types; not part of the API. */
final class Json {
  /** Jackson's mapper: thread-safe once configured, used for trees only (no data binding). */
  static final ObjectMapper MAPPER = new ObjectMapper();

  private static final DateTimeFormatter RFC3339_MILLIS =
      DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").withZone(ZoneOffset.UTC);

  private Json() {}

  static ObjectNode object() {
    return JsonNodeFactory.instance.objectNode();
  }

  /** Any Java value (a {@link JsonNode}, a map, a list, a string, a number, a POJO) as JSON. */
  static JsonNode toTree(Object value) {
    if (value == null) {
      return NullNode.getInstance();
    }
    if (value instanceof JsonNode) {
      return (JsonNode) value;
    }
    try {
      return MAPPER.valueToTree(value);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(
          "cannot turn a " + value.getClass().getName() + " into JSON: " + e.getMessage(), e);
    }
  }

  static String write(JsonNode node) {
    try {
      return MAPPER.writeValueAsString(node);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("a JSON tree could not be written", e);
    }
  }

  /** {@code at} in UTC, RFC 3339 with milliseconds, as the API writes times. */
  static String formatTime(Instant at) {
    return RFC3339_MILLIS.format(at.truncatedTo(ChronoUnit.MILLIS));
  }

  static Instant parseTime(String text) {
    return java.time.OffsetDateTime.parse(text.trim()).toInstant();
  }

  // -- reading the API's objects ---------------------------------------------------------

  static JsonNode required(JsonNode node, String field) {
    JsonNode value = node.get(field);
    if (value == null || value.isNull()) {
      throw new IllegalArgumentException("the answer has no `" + field + "`: " + node);
    }
    return value;
  }

  static long requiredLong(JsonNode node, String field) {
    return required(node, field).asLong();
  }

  static int requiredInt(JsonNode node, String field) {
    return required(node, field).asInt();
  }

  static String requiredText(JsonNode node, String field) {
    return required(node, field).asText();
  }

  static Instant requiredTime(JsonNode node, String field) {
    return parseTime(requiredText(node, field));
  }

  static int intOr(JsonNode node, String field, int otherwise) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? otherwise : value.asInt();
  }

  static Optional<String> optionalText(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? Optional.empty() : Optional.of(value.asText());
  }

  static OptionalLong optionalLong(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? OptionalLong.empty() : OptionalLong.of(value.asLong());
  }

  static OptionalInt optionalInt(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null || value.isNull() ? OptionalInt.empty() : OptionalInt.of(value.asInt());
  }

  static Optional<Instant> optionalTime(JsonNode node, String field) {
    return optionalText(node, field).map(Json::parseTime);
  }

  /** A JSON value that may be absent: JSON {@code null} then. Never Java {@code null}. */
  static JsonNode anyJson(JsonNode node, String field) {
    JsonNode value = node.get(field);
    return value == null ? NullNode.getInstance() : value.deepCopy();
  }

  static List<Long> longs(JsonNode array) {
    if (array == null || !array.isArray()) {
      return Collections.emptyList();
    }
    List<Long> out = new ArrayList<>(array.size());
    array.forEach(v -> out.add(v.asLong()));
    return Collections.unmodifiableList(out);
  }
}
